//go:build linux || darwin

package seatbelt

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// logLine is one line of `log stream --style ndjson` holding msg.
func logLine(msg string) string {
	b, _ := json.Marshal(map[string]any{"eventMessage": msg, "processImagePath": "/kernel", "senderImagePath": "/System/Library/Extensions/Sandbox.kext/Contents/MacOS/Sandbox"})
	return string(b) + "\n"
}

func TestParseDenial(t *testing.T) {
	for _, c := range []struct {
		line string
		want denial
		ok   bool
	}{
		{logLine("Sandbox: cat(4242) deny(1) file-read-data /Users/a/.ssh/id_rsa"), denial{"cat", 4242, "file-read-data", "/Users/a/.ssh/id_rsa"}, true},
		{logLine("Sandbox: Python Helper (x)(7) deny(1) file-read-data /Users/a/my secrets/k"), denial{"Python Helper (x)", 7, "file-read-data", "/Users/a/my secrets/k"}, true},
		{logLine("Sandbox: curl(9) deny(1) network-outbound 93.184.216.34:443"), denial{"curl", 9, "network-outbound", "93.184.216.34:443"}, true},
		{logLine("Sandbox: curl(9) allow(0) network-outbound 127.0.0.1:4000"), denial{}, false},
		{logLine("something else entirely"), denial{}, false},
		{`{"eventMessage": "Sandbox: cat(1) deny(1) file-read-data /x"`, denial{}, false}, // cut short
		{"Filtering the log data using \"sender == Sandbox\"\n", denial{}, false},
	} {
		got, ok := parseDenial([]byte(strings.TrimSpace(c.line)))
		if ok != c.ok || got != c.want {
			t.Errorf("%s: got %+v %v, want %+v %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

// fakeStream is `log stream` for the Linux tests: lines written to w, and
// mark writing the marker's denial (after what came before it, as the
// kernel's log keeps order).
type fakeStream struct {
	r *io.PipeReader
	w *io.PipeWriter
}

func newFakeStream() *fakeStream {
	r, w := io.Pipe()
	return &fakeStream{r: r, w: w}
}

func (f *fakeStream) send(msgs ...string) {
	for _, m := range msgs {
		io.WriteString(f.w, logLine(m))
	}
}

func (f *fakeStream) mark(_ context.Context, path string) error {
	f.send("Sandbox: cat(1) deny(1) file-read-data " + path)
	return nil
}

// TestDenialsToViolations: between the start and end markers, a read of a
// masked path (the host's, and the clone's, named by its original) is one
// {kind: secret} violation per path, as on ns; a direct connection is a
// blocked network event; a denial of anything else, and the markers
// themselves, are neither.
func TestDenialsToViolations(t *testing.T) {
	scratch := t.TempDir()
	root, orig := scratch+"/w", "/Users/a/proj"
	pr := Profile{Writable: []string{root, scratch + "/tmp"}, Masked: []string{"/Users/a/.ssh", "/Users/a/.netrc", root + "/.env"}, NetProxyPort: 4000}
	fs := newFakeStream()
	l := newDenialLog(fs.r, scratch, fs.mark, func() { fs.w.Close() })
	ctx := context.Background()
	if err := l.markAndWait(ctx, "mark-start"); err != nil {
		t.Fatal(err)
	}
	fs.send(
		"Sandbox: cat(10) deny(1) file-read-data /Users/a/.ssh/id_rsa",
		"Sandbox: cat(11) deny(1) file-read-data /Users/a/.ssh/id_rsa", // the same path again
		"Sandbox: sh(12) deny(1) file-read-data "+root+"/.env",
		"Sandbox: ls(13) deny(1) file-read-data /Users/a/.ssh",
		"Sandbox: touch(14) deny(1) file-write-create /Users/a/elsewhere", // not masked: a write outside the clone
		"Sandbox: curl(15) deny(1) network-outbound 93.184.216.34:443",
		"Sandbox: ssh(16) deny(1) network-outbound [2001:db8::1]:22",
		"Sandbox: dig(17) deny(1) network-outbound /private/var/run/mDNSResponder", // a unix socket
		"Sandbox: cat(18) deny(1) file-read-data /Users/a/.netrc-not",              // a sibling, not beneath
	)
	denied, warn := l.stop(ctx)
	if warn != "" {
		t.Fatal(warn)
	}
	if len(denied) != 9 {
		t.Fatalf("%d denials, want the command's 9 (markers excluded): %+v", len(denied), denied)
	}
	var got []string
	for _, v := range pr.violations(denied, func(p string) string { return fromClone(p, root, orig) }) {
		got = append(got, fmt.Sprintf("%s %s %d %s", v.Kind, v.Detail, v.PID, v.Exe))
	}
	want := []string{"secret /Users/a/.ssh/id_rsa 10 cat", "secret /Users/a/proj/.env 12 sh", "secret /Users/a/.ssh 13 ls"}
	if !slices.Equal(got, want) {
		t.Errorf("violations\n %q\nwant\n %q", got, want)
	}
	var nets []string
	for _, e := range pr.networkEvents(denied) {
		nets = append(nets, fmt.Sprintf("%s %s %d %s", e.Proto, e.Host, e.Port, e.Action))
		if !strings.Contains(e.Reason, "not through netsim's proxy") {
			t.Errorf("reason %q", e.Reason)
		}
	}
	if want := []string{"tcp 93.184.216.34 443 blocked", "tcp 2001:db8::1 22 blocked"}; !slices.Equal(nets, want) {
		t.Errorf("network events %q, want %q", nets, want)
	}
}

// TestDenialLogEndsEarly: a stream that ends before the end marker (log
// killed, reporting off) gives what it held and a warning, never a hang;
// one that ends before the start marker is a warning too.
func TestDenialLogEndsEarly(t *testing.T) {
	ctx := context.Background()
	fs := newFakeStream()
	l := newDenialLog(fs.r, t.TempDir(), fs.mark, func() { fs.w.Close() })
	if err := l.markAndWait(ctx, "mark-start"); err != nil {
		t.Fatal(err)
	}
	fs.send("Sandbox: cat(10) deny(1) file-read-data /Users/a/.ssh/id_rsa")
	fs.w.Close()
	denied, warn := l.stop(ctx)
	if len(denied) != 1 || !strings.Contains(warn, "may be missing") {
		t.Fatalf("denials %+v, warning %q", denied, warn)
	}

	fs = newFakeStream()
	l = newDenialLog(fs.r, t.TempDir(), func(context.Context, string) error { fs.w.Close(); return nil }, func() {})
	if err := l.markAndWait(ctx, "mark-start"); err == nil || !strings.Contains(err.Error(), "ended before the marker") {
		t.Fatalf("got %v", err)
	}
	l.close()
}

// TestViolationKind: what the seatbelt rung reports is the kind the policy
// weighs as a contained read (issue: the same as ns), not another.
func TestViolationKind(t *testing.T) {
	v := Profile{Masked: []string{"/m"}}.violations([]denial{{Proc: "cat", PID: 1, Op: "file-read-data", Target: "/m/k"}}, func(p string) string { return p })
	if len(v) != 1 || v[0].Kind != dryexec.ViolationSecret {
		t.Fatalf("%+v", v)
	}
}
