package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/server"
)

// SIGTERM drains: the running trial finishes and is stored, sessions are
// closed, their sandboxes and host leftovers gone, the socket removed.
func TestSIGTERMDrains(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	p := startProc(t, filepath.Join(dir, "home"), filepath.Join(dir, "d.sock"))
	c := p.client()
	wd := t.TempDir()
	var hostSess, nsSess server.SessionInfo
	c.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: "host"}, 201, &hostSess)
	c.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: "ns"}, 201, &nsSess)
	hostTmp := filepath.Dir(hostSess.Workspace)
	if _, err := os.Stat(hostTmp); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sc, closeStream := c.stream(t, ctx, server.TrialRequest{Argv: []string{"sh", "-c", "echo started; sleep 1; echo done > f"}, Cwd: wd})
	defer closeStream()
	if e := nextEvent(t, sc); e.Event != "started" {
		t.Fatalf("%+v", e)
	}
	if e := nextEvent(t, sc); e.Data != "started\n" {
		t.Fatalf("%+v", e)
	}
	kids := descendants(p.cmd.Process.Pid)
	if len(kids) < 3 {
		t.Fatalf("expected the guests of two sessions and a trial under the daemon, found %v", kids)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	var last event
	for sc.Scan() {
		json.Unmarshal(sc.Bytes(), &last)
	}
	if last.Event != "delta" || len(last.Delta.Files) != 1 || last.Delta.Process.ExitCode != 0 {
		t.Fatalf("the running trial did not finish during the drain: %+v", last)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("daemon exit: %v\n%s", p.err, p.out)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the daemon did not exit after SIGTERM\n%s", p.out)
	}
	if left := gone(kids, 10*time.Second); len(left) > 0 {
		t.Fatalf("processes left after SIGTERM: %v", left)
	}
	if _, err := os.Stat(hostTmp); !os.IsNotExist(err) {
		t.Fatalf("the host session's temp dir is left: %v", err)
	}
	if _, err := os.Lstat(p.sock); !os.IsNotExist(err) {
		t.Fatalf("the socket is left: %v", err)
	}
	if recs, _ := filepath.Glob(filepath.Join(p.home, "serve", "sessions", "*")); len(recs) != 0 {
		t.Fatalf("session records left: %v", recs)
	}
	// The drained trial is in the store, pending.
	svc, err := server.NewService(server.Config{StoreDir: p.home})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if _, st, err := svc.Trial(last.Delta.TrialID); err != nil || st.Status != "pending" {
		t.Fatalf("drained trial: %v %v", st, err)
	}
}

// A SIGKILLed daemon leaves nothing the next start does not clean: its
// sandboxes die with it, and the next daemon removes the stale socket, the
// half-recorded trial and the host session's temp dir.
func TestSIGKILLLeavesNothing(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	home, sock := filepath.Join(dir, "home"), filepath.Join(dir, "d.sock")
	p := startProc(t, home, sock)
	c := p.client()
	wd := t.TempDir()
	var hostSess, nsSess server.SessionInfo
	c.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: "host"}, 201, &hostSess)
	c.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: "ns"}, 201, &nsSess)
	// A host-session exec that would outlive a careless daemon.
	go func() {
		resp, err := c.client.Post(c.base+"/v1/sessions/"+hostSess.SessionID+"/shell", "application/json", strings.NewReader(`{"command":"sleep 600"}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sc, closeStream := c.stream(t, ctx, server.TrialRequest{Argv: []string{"sh", "-c", "echo x > f; echo started; sleep 600"}, Cwd: wd})
	defer closeStream()
	started := nextEvent(t, sc)
	if started.Event != "started" {
		t.Fatalf("%+v", started)
	}
	nextEvent(t, sc) // its output: it is running
	// Nothing of a trial is written until it has something to keep; what a
	// daemon killed while recording leaves (a .partial with a lock nobody
	// holds) is planted here, for the next start to remove.
	partial := filepath.Join(home, "trials", dryexec.NewTrialID()+".partial")
	if err := os.MkdirAll(filepath.Join(partial, "blobs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(partial, "lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	hostTmp := filepath.Dir(hostSess.Workspace)
	// The ns sandboxes die with the daemon; what a host-rung exec started
	// (no pid namespace there) is killed by the next start.
	// The host-session exec was asked for from another goroutine: wait
	// until it runs.
	var nsKids, hostKids []int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		nsKids, hostKids = nil, nil
		for _, pid := range descendants(p.cmd.Process.Pid) {
			if cwd, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd"); strings.HasPrefix(cwd, hostTmp+"/") {
				hostKids = append(hostKids, pid)
			} else {
				nsKids = append(nsKids, pid)
			}
		}
		if len(hostKids) > 0 && len(nsKids) >= 2 {
			break
		}
	}
	if len(hostKids) == 0 || len(nsKids) < 2 {
		t.Fatalf("expected host-exec and ns processes under the daemon: host %v ns %v", hostKids, nsKids)
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	if left := gone(nsKids, 10*time.Second); len(left) > 0 {
		t.Fatalf("processes outlived the SIGKILLed daemon:\n%s", describe(left))
	}
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("expected a stale socket after SIGKILL: %v", err)
	}
	// The next start cleans.
	p2 := startProc(t, home, sock)
	if _, err := os.Stat(hostTmp); !os.IsNotExist(err) {
		t.Fatalf("the host session's temp dir survived the restart: %v", err)
	}
	if left := gone(hostKids, 10*time.Second); len(left) > 0 {
		t.Fatalf("the host session's exec survived the restart:\n%s", describe(left))
	}
	if left, _ := filepath.Glob(filepath.Join(home, "trials", "*.partial")); len(left) != 0 {
		t.Fatalf("half-recorded trials survived the restart: %v", left)
	}
	if recs, _ := filepath.Glob(filepath.Join(home, "serve", "sessions", "*")); len(recs) != 0 {
		t.Fatalf("session records survived the restart: %v", recs)
	}
	if _, err := os.Stat(filepath.Join(wd, "f")); !os.IsNotExist(err) {
		t.Fatal("the killed trial changed the host")
	}
	var h map[string]any
	p2.client().ok(t, "GET", "/v1/health", nil, 200, &h)
}

// A daemon trial and a `dryexec run` of the same command get the same
// decision, and both receipts verify with the install's key.
func TestSameDecisionAsCLI(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	wd := t.TempDir()
	argv := []string{"sh", "-c", "echo hi > new.txt; rm -f gone.txt"}
	os.WriteFile(filepath.Join(wd, "gone.txt"), []byte("x"), 0o644)
	cmd := exec.Command(os.Args[0], append([]string{"run", "--json", "--"}, argv...)...)
	cmd.Dir = wd
	cmd.Env = append(os.Environ(), asCLI+"=1", "DRYEXEC_HOME="+home)
	out, err := cmd.Output()
	var cliDelta dryexec.StateDelta
	if jerr := json.Unmarshal(out, &cliDelta); jerr != nil {
		t.Fatalf("dryexec run: %v %v\n%s", err, jerr, out)
	}
	p := startProc(t, home, filepath.Join(dir, "d.sock"))
	var apiDelta dryexec.StateDelta
	p.client().ok(t, "POST", "/v1/trials", server.TrialRequest{Argv: argv, Cwd: wd}, 201, &apiDelta)
	if cliDelta.Decision.Choice == "" || cliDelta.Decision.Choice != apiDelta.Decision.Choice ||
		cliDelta.Decision.RiskScore != apiDelta.Decision.RiskScore ||
		strings.Join(cliDelta.Decision.Reasons, "\n") != strings.Join(apiDelta.Decision.Reasons, "\n") {
		t.Fatalf("decisions differ:\ncli %+v\napi %+v", cliDelta.Decision, apiDelta.Decision)
	}
	if apiDelta.Receipt.KeyID == "" || apiDelta.Receipt.KeyID != cliDelta.Receipt.KeyID || apiDelta.Receipt.Signature == "" {
		t.Fatalf("receipts: cli %+v api %+v", cliDelta.Receipt, apiDelta.Receipt)
	}
}

func describe(pids []int) string {
	var b bytes.Buffer
	for _, pid := range pids {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		b.WriteString(strconv.Itoa(pid) + ": " + strings.ReplaceAll(string(cmdline), "\x00", " ") + "\n")
	}
	return b.String()
}
