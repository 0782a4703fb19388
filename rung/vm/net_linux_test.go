package vm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/internal/testwait"
	"github.com/dryexec/dryexec/netsim/netproc"
	"github.com/dryexec/dryexec/netsim/tun"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// hostAddr is a non-loopback IPv4 address of this host, where a test's real
// server listens: an allow rule may not name 127.0.0.1 (inside a sandbox it
// is the sandbox's own lo), and traffic to the host's own address never
// leaves the machine.
func hostAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("this host has no non-loopback IPv4 address for the test's server")
	return ""
}

// TestNetSameAsNS: a vm trial's network goes through the same netsim as an
// ns trial's, behind the VM's virtio-net: a request allowed by policy
// reaches a real server on this host, a mocked HTTPS API answers (the VM
// trusts netsim's CA), a host neither allowed nor mocked is refused, DNS is
// netsim's; the command's output and the delta's network log equal ns's for
// the same spec, and the delta is complete.
func TestNetSameAsNS(t *testing.T) {
	r := testRung(t)
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	testreq.Need(t, testreq.Netsim, tun.CheckTUN())
	var mu sync.Mutex
	var hits []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		hits = append(hits, req.URL.Path)
		mu.Unlock()
		fmt.Fprintf(w, "real %s", req.URL.Path)
	})}
	l, err := net.Listen("tcp", net.JoinHostPort(hostAddr(t), "0"))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	addr := l.Addr().String()
	dir := t.TempDir()
	mock := filepath.Join(dir, "mock.yaml")
	if err := os.WriteFile(mock, []byte("routes:\n  - host: api.example.com\n    path: /v1/ping\n    json: {pong: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`curl -sS -m 60 http://%s/ok; echo
curl -sS -m 60 https://api.example.com/v1/ping; echo
curl -sS -m 60 -o /dev/null -w '%%{http_code}\n' http://denied.example.org/
getent hosts api.example.com > /dev/null; echo dns=$?`, addr)
	spec := dryexec.TrialSpec{TrialID: "tr_vmnet", Net: []string{"allow:" + addr, "mock:" + mock}, NetCADir: filepath.Join(t.TempDir(), "ca")}
	spec.Action.TimeoutMS = 180_000
	want := "real /ok\n{\"pong\":true}\n403\ndns=0\n"
	var logs [2][]dryexec.NetworkEvent
	for i, rg := range []dryexec.Rung{&linuxns.Rung{}, r} {
		d := runTrial(t, rg, dir, spec, "sh", "-c", script)
		if d.Process.Stdout != want || d.Incomplete {
			t.Errorf("%s: stdout %q (want %q), incomplete %v %s\nstderr: %s", rg.Name(), d.Process.Stdout, want, d.Incomplete, d.IncompleteReason, d.Process.Stderr)
		}
		logs[i] = d.Network
	}
	if !reflect.DeepEqual(logs[0], logs[1]) {
		t.Errorf("network logs differ:\nns: %+v\nvm: %+v", logs[0], logs[1])
	}
	if len(hits) != 2 {
		t.Errorf("the real server saw %q, want /ok from each rung", hits)
	}
}

// TestNetsimKilled: killing a vm trial's netsim process mid-trial ends the
// trial's network, not the trial: the delta keeps what was logged before,
// and is marked incomplete with the reason (so it is decided block), as on
// ns (test/network's TestNetsimKilledMidTrial).
func TestNetsimKilled(t *testing.T) {
	r := testRung(t)
	dir := t.TempDir()
	mock := filepath.Join(dir, "mock.yaml")
	if err := os.WriteFile(mock, []byte("routes:\n  - host: api.example.com\n    path: /v1/ping\n    json: {pong: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &testwait.Buffer{}
	in, feed := io.Pipe()
	spec := dryexec.TrialSpec{Net: []string{"mock:" + mock}, NetCADir: filepath.Join(t.TempDir(), "ca"), Stdout: out, Stdin: in}
	spec.Action = dryexec.Action{Cwd: dir, Env: testPath, TimeoutMS: 180_000, Argv: []string{"sh", "-c",
		`curl -sS -m 60 https://api.example.com/v1/ping; echo; echo READY; read x; curl -sS -m 5 https://api.example.com/v1/ping || echo AFTER-KILL-FAILED`}}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	done := make(chan struct{})
	var d *dryexec.StateDelta
	var trialErr error
	go func() {
		defer close(done)
		d, trialErr = r.Trial(ctx, spec)
	}()
	testwait.For(t, 3*time.Minute, "the command's first request", func() bool { return strings.Contains(out.String(), "READY") })
	pids := netproc.Children(os.Getpid())
	if len(pids) != 1 {
		t.Fatalf("netsim processes of this test: %v, want one", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	feed.Write([]byte("go\n"))
	feed.Close()
	<-done
	if trialErr != nil {
		t.Fatalf("the trial failed: %v", trialErr)
	}
	if !strings.Contains(d.Process.Stdout, `"pong":true`) || !strings.Contains(d.Process.Stdout, "AFTER-KILL-FAILED") {
		t.Errorf("stdout %q: want the mocked answer before the kill and a failed request after it", d.Process.Stdout)
	}
	if !d.Incomplete || !strings.Contains(d.IncompleteReason, "network ended early") || !strings.Contains(d.IncompleteReason, netproc.ErrCrashed.Error()) {
		t.Errorf("incomplete %v reason %q: want the network's early end", d.Incomplete, d.IncompleteReason)
	}
	mocked := false
	for _, e := range d.Network {
		mocked = mocked || (e.Host == "api.example.com" && e.Action == "mocked")
	}
	if !mocked {
		t.Errorf("the log lost the request before the kill: %+v", d.Network)
	}
}

// TestNetBadMock: a mock file netsim refuses (a credential to inject that
// is not there: found by netsim's process, not the host's parse) fails the
// trial with ErrBadAction, before the command runs (netsim starts while the
// VM boots, and the trial waits for it after the boot), and leaves no
// netsim process behind.
func TestNetBadMock(t *testing.T) {
	r := testRung(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("allow:\n  - host: api.example.com\n    inject:\n      Authorization: {env: DRYEXEC_TEST_NO_SUCH_VAR}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := dryexec.TrialSpec{Net: []string{"mock:" + bad}, NetCADir: filepath.Join(t.TempDir(), "ca"),
		Action: dryexec.Action{Argv: []string{"true"}, Cwd: dir, Env: testPath}}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	d, err := r.Trial(ctx, spec)
	if !errors.Is(err, dryexec.ErrBadAction) {
		t.Fatalf("delta %v, error %v: want ErrBadAction", d != nil, err)
	}
	if pids := netproc.Children(os.Getpid()); len(pids) != 0 {
		t.Errorf("netsim processes left: %v", pids)
	}
}
