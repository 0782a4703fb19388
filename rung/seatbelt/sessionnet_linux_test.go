package seatbelt

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
)

// fakeWatch has n read Seatbelt's reports from a fake stream: the reports
// queued in *late reach it only with the next marker's, as the kernel's
// log delivers them late; *waits counts the markers.
func fakeWatch(ctx context.Context, n *sessionNet, pr Profile, marks string, late *[]string, waits *int) {
	n.watchDenials(ctx, pr, marks, func(ctx context.Context, marks, tag string) (*denialLog, string) {
		fs := newFakeStream()
		fs.tag = tag
		mark := func(ctx context.Context, path string) error {
			*waits++
			fs.send(*late...)
			*late = nil
			return fs.mark(ctx, path)
		}
		l := newDenialLog(fs.r, tag, marks, mark, func() { fs.w.Close() })
		if err := l.markAndWait(ctx, "mark-start"); err != nil {
			return nil, err.Error()
		}
		return l, ""
	})
}

// TestSessionNetPerExec: a session's execs reach the session's one netsim
// through its proxy (the session's mocks answer, the caller's NO_PROXY is
// gone, the proxy URL carries the session's token), and the log read as
// package session reads it (its length before an exec, what was appended
// after) gives each exec its own requests and its own direct connections,
// though Seatbelt reports those only after the exec has ended; a masked
// read is one violation, reported once; the log stays readable after
// close. (On Linux the commands run unconfined and Seatbelt's reports are
// written by the test, tagged with the session's tag.)
func TestSessionNetPerExec(t *testing.T) {
	testreq.NeedTool(t, "curl")
	ctx := context.Background()
	dir := t.TempDir()
	mocks := filepath.Join(dir, "mocks.yaml")
	if err := os.WriteFile(mocks, []byte("routes:\n  - host: api.example.test\n    path: /v1/*\n    status: 200\n    body: mocked\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp, marks := filepath.Join(dir, "tmp"), filepath.Join(dir, "marks")
	for _, d := range []string{tmp, marks} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	pf := linuxPlatform(t, nil, nil)
	n, err := openSessionNet(ctx, dryexec.SandboxSpec{ID: "se_test", Net: []string{"mock:" + mocks}}, pf.getenv, filepath.Join(dir, "netsim-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	pr := Profile{Writable: []string{tmp}, Masked: []string{"/Users/a/.ssh"}, Hidden: []string{marks}, NetProxyPort: n.nw.port, Tag: n.tag}
	// The kernel's reports reach the stream late: only when a later one
	// (a marker's) is delivered, all of them in order.
	var late []string
	fakeWatch(ctx, n, pr, marks, &late, new(int))
	if w := n.Warnings(); len(w) != 0 {
		t.Fatal(w)
	}
	env := n.env([]string{"PATH=/usr/bin:/bin", "NO_PROXY=*", "no_proxy=*", "LANG=C"}, tmp)
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == "NO_PROXY" || k == "no_proxy" {
			t.Errorf("the exec environment keeps %s", kv)
		}
	}
	if !slices.Contains(env, "TMPDIR="+tmp) || !slices.Contains(env, "LANG=C") || !slices.ContainsFunc(env, func(kv string) bool {
		return strings.HasPrefix(kv, "http_proxy=http://dryexec:") && strings.HasSuffix(kv, fmt.Sprintf("@127.0.0.1:%d", n.nw.port))
	}) {
		t.Errorf("exec environment %q", env)
	}
	summary := func(evs []dryexec.NetworkEvent) []string {
		var out []string
		for _, e := range evs {
			if e.URL != "" {
				out = append(out, fmt.Sprintf("%s %s %d", e.Action, e.URL, e.Status))
			} else {
				out = append(out, fmt.Sprintf("%s %s %s:%d", e.Action, e.Proto, e.Host, e.Port))
			}
		}
		return out
	}
	// run is one exec as package session sees it: the log's length before,
	// the command, the kernel's late reports of it, what was appended.
	run := func(path string, reports ...string) []string {
		mark := len(n.Network())
		cmd := exec.Command("curl", "-sS", "http://api.example.test/v1/"+path)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if string(out) != "mocked" {
			t.Errorf("curl /v1/%s: %q %v", path, out, err)
		}
		late = append(late, reports...)
		return summary(n.Network()[mark:])
	}
	got := run("a", "Sandbox: nc(7) deny(1) network-outbound 10.0.0.1:22", "Sandbox: cat(8) deny(1) file-read-data /Users/a/.ssh/id_rsa")
	if want := []string{"mocked http://api.example.test/v1/a 200", "blocked tcp 10.0.0.1:22"}; !slices.Equal(got, want) {
		t.Errorf("exec 1's network %q, want %q", got, want)
	}
	got = run("b", "Sandbox: cat(9) deny(1) file-read-data /Users/a/.ssh/id_rsa")
	if want := []string{"mocked http://api.example.test/v1/b 200"}; !slices.Equal(got, want) {
		t.Errorf("exec 2's network %q, want %q", got, want)
	}
	v := n.Violations()
	if len(v) != 1 || v[0].Kind != dryexec.ViolationSecret || v[0].Detail != "/Users/a/.ssh/id_rsa" || v[0].PID != 8 {
		t.Errorf("violations %+v, want the one masked path, first read by pid 8", v)
	}
	if v := n.Violations(); len(v) != 0 {
		t.Errorf("violations reported twice: %+v", v)
	}
	n.close()
	if got := summary(n.Network()); len(got) != 3 {
		t.Errorf("after close the log is %q", got)
	}
}

// nopConn stands for the guest's control connection: what is written to
// it goes nowhere.
type nopConn struct{}

func (nopConn) Read([]byte) (int, error)    { return 0, io.EOF }
func (nopConn) Write(b []byte) (int, error) { return len(b), nil }
func (nopConn) Close() error                { return nil }

// TestSessionNetOneWait: Network and Violations called together read
// Seatbelt's reports up to one marker, whichever comes first; but a call
// of the same kind again, or either after anything was sent to the guest
// (an exec may have run), waits for a marker of its own, so an exec's
// masked read is in the very next Violations.
func TestSessionNetOneWait(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	marks := filepath.Join(dir, "marks")
	if err := os.Mkdir(marks, 0o700); err != nil {
		t.Fatal(err)
	}
	n, err := openSessionNet(ctx, dryexec.SandboxSpec{ID: "se_test"}, linuxPlatform(t, nil, nil).getenv, filepath.Join(dir, "netsim-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	pr := Profile{Writable: []string{dir}, Masked: []string{"/Users/a/.ssh"}, Hidden: []string{marks}, NetProxyPort: n.nw.port, Tag: n.tag}
	// The reports reach the stream when the next marker's does.
	var late []string
	waits := 0
	fakeWatch(ctx, n, pr, marks, &late, &waits)
	conn := &sentConn{ReadWriteCloser: nopConn{}, sent: &n.sent}
	read := func(key string) string {
		switch key {
		case "N":
			return fmt.Sprint(len(n.Network()))
		default:
			var got []string
			for _, v := range n.Violations() {
				got = append(got, v.Detail)
			}
			return strings.Join(got, ",")
		}
	}
	denyRead := func(p string) { late = append(late, "Sandbox: cat(8) deny(1) file-read-data "+p) }
	steps := []struct {
		exec      string // a masked path an exec reads first ("": no exec)
		read      string // N: Network, V: Violations
		wantWaits int
		want      string
	}{
		{"/Users/a/.ssh/a", "N", 1, "0"},
		{"", "V", 0, "/Users/a/.ssh/a"}, // together: the Network's marker
		{"", "V", 1, ""},                // again: a marker of its own
		{"", "N", 0, "0"},               // together with that Violations
		{"/Users/a/.ssh/b", "V", 1, "/Users/a/.ssh/b"},
		{"/Users/a/.ssh/c", "N", 1, "0"},
		// An exec after the Network: its read is in the next Violations.
		{"/Users/a/.ssh/d", "V", 1, "/Users/a/.ssh/c,/Users/a/.ssh/d"},
	}
	for i, s := range steps {
		if s.exec != "" {
			conn.Write([]byte(`{"verb":"exec_shell"}`))
			denyRead(s.exec)
		}
		before := waits
		if got := read(s.read); got != s.want || waits-before != s.wantWaits {
			t.Errorf("step %d (%s): %q after %d markers, want %q after %d", i, s.read, got, waits-before, s.want, s.wantWaits)
		}
	}
}
