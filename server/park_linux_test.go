package server_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/vm"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/wire"
)

// A rung that cannot park refuses, typed, and the session goes on.
func TestParkUnsupported(t *testing.T) {
	requireNS(t)
	d := startDaemon(t, server.Config{}, server.HandlerOptions{})
	var info server.SessionInfo
	d.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: "ns"}, 201, &info)
	sp := "/v1/sessions/" + info.SessionID
	d.fails(t, "POST", sp+"/park", nil, 501, "park_unsupported")
	var sr wire.ShellResult
	d.ok(t, "POST", sp+"/shell", server.ShellRequest{Command: "echo alive"}, 200, &sr)
	if sr.Transcript != "alive\n" {
		t.Fatalf("after a refused park: %+v", sr)
	}
	var pl struct{ Parked []server.ParkedInfo }
	d.ok(t, "GET", "/v1/parked", nil, 200, &pl)
	if len(pl.Parked) != 0 {
		t.Fatalf("parked: %+v", pl.Parked)
	}
	d.fails(t, "POST", "/v1/parked/"+info.SessionID+"/resume", nil, 404, "not_found")
}

// A saved state no parked session of this daemon owns (an earlier
// daemon's) is removed by Recover; the daemon's own are not.
func TestParkedGC(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	stale := filepath.Join(home, "parked", "se_aaaaaaaaaaaaaaaaaaaa")
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, vm.ParkFile), []byte("state"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc, err := server.NewService(server.Config{StoreDir: home})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if err := svc.Recover(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("a stale park survived Recover: %v", err)
	}
}

// requireVMDaemon skips unless VMs boot here and DRYEXEC_TEST_VM is set,
// and names a static guest (the VM's /init) for the daemon's sessions.
func requireVMDaemon(t *testing.T) {
	t.Helper()
	if os.Getenv("DRYEXEC_TEST_VM") == "" {
		t.Skip("set DRYEXEC_TEST_VM=1 (make test-vm) to run it")
	}
	exe := filepath.Join(t.TempDir(), guestexe.Name)
	build := exec.Command("go", "build", "-o", exe, "github.com/dryexec/dryexec/cmd/dryexec-guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the static guest: %v\n%s", err, out)
	}
	t.Setenv(guestexe.Env, exe)
	testreq.Need(t, testreq.VM, (&vm.Rung{}).Available(context.Background()))
}

// A vm session parked over the API leaves the live list for the parked one,
// holds its saved state under the store, and resumes under its id with its
// shell state, workspace and cache.
func TestParkResumeVM(t *testing.T) {
	requireVMDaemon(t)
	d := startDaemon(t, server.Config{}, server.HandlerOptions{})
	var info server.SessionInfo
	d.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: "vm", Cache: map[string]server.CacheItem{"k": {Bytes: []byte("v")}}}, 201, &info)
	sp := "/v1/sessions/" + info.SessionID
	var sr wire.ShellResult
	d.ok(t, "POST", sp+"/shell", server.ShellRequest{Command: "mkdir d && cd d && echo hi > a.txt && export X=1"}, 200, &sr)
	if sr.ExitCode != 0 {
		t.Fatalf("shell: %+v", sr)
	}
	var pi server.ParkedInfo
	d.ok(t, "POST", sp+"/park", nil, 200, &pi)
	if pi.SessionID != info.SessionID || pi.Rung != "vm" || pi.Bytes == 0 {
		t.Fatalf("parked: %+v", pi)
	}
	if _, err := os.Stat(filepath.Join(d.home, "parked", info.SessionID, vm.ParkFile)); err != nil {
		t.Fatalf("the saved state: %v", err)
	}
	d.fails(t, "GET", sp, nil, 404, "not_found")
	var pl struct{ Parked []server.ParkedInfo }
	d.ok(t, "GET", "/v1/parked", nil, 200, &pl)
	if len(pl.Parked) != 1 || pl.Parked[0].SessionID != info.SessionID {
		t.Fatalf("parked list: %+v", pl.Parked)
	}
	var again server.SessionInfo
	d.ok(t, "POST", "/v1/parked/"+info.SessionID+"/resume", nil, 200, &again)
	if again.SessionID != info.SessionID {
		t.Fatalf("resumed as %+v", again)
	}
	d.ok(t, "POST", sp+"/shell", server.ShellRequest{Command: "pwd; echo $X; cat a.txt"}, 200, &sr)
	if sr.Transcript != "/workspace/d\n1\nhi\n" {
		t.Fatalf("after resume: %+v", sr)
	}
	if resp, data := d.do(t, "GET", sp+"/cache/k", nil); resp.StatusCode != 200 || string(data) != "v" {
		t.Fatalf("cache after resume: %d %q", resp.StatusCode, data)
	}
	if _, err := os.Stat(filepath.Join(d.home, "parked", info.SessionID)); !os.IsNotExist(err) {
		t.Fatalf("the saved state outlived the resume: %v", err)
	}
	d.ok(t, "GET", "/v1/parked", nil, 200, &pl)
	if len(pl.Parked) != 0 {
		t.Fatalf("still listed after resume: %+v", pl.Parked)
	}
}

// A park outlives its daemon: a vm session parked under one Service, that
// Service closed (as the daemon exits), is listed by a new daemon on the
// same store and resumes there with its workspace, shell state, cache and
// host objects' allowlist.
func TestParkOutlivesDaemonVM(t *testing.T) {
	requireVMDaemon(t)
	ctx := context.Background()
	home := filepath.Join(t.TempDir(), "home")
	first, err := server.NewService(server.Config{StoreDir: home, Getenv: func(k string) string {
		if k == "PATH" {
			return "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			first.Close()
		}
	}()
	l, err := first.OpenSession(ctx, server.SessionRequest{Rung: "vm", Cache: map[string]server.CacheItem{"k": {Bytes: []byte("v")}},
		HostObjects: map[string][]string{"db": {"query"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := l.ID
	sr, err := l.Session.Shell(ctx, "mkdir d && cd d && echo hi > a.txt && export X=1", 0)
	if err != nil || sr.ExitCode != 0 {
		t.Fatalf("shell: %+v %v", sr, err)
	}
	pi, err := first.ParkSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d := pi.Expires.Sub(pi.Parked); d != server.DefaultParkTTL {
		t.Errorf("expires %v after the park, want %v", d, server.DefaultParkTTL)
	}
	first.Close()
	closed = true
	if _, err := os.Stat(filepath.Join(home, "parked", id, vm.ParkFile)); err != nil {
		t.Fatalf("the park did not outlive its daemon: %v", err)
	}
	var rec map[string]any
	if b, err := os.ReadFile(filepath.Join(home, "parked", id, "park.json")); err != nil || json.Unmarshal(b, &rec) != nil {
		t.Fatalf("the park's record: %v", err)
	}
	if _, ok := rec["owner"]; ok || rec["session_id"] != id {
		t.Fatalf("the record after its daemon's exit still names an owner, or another session: %v %v", rec["owner"], rec["session_id"])
	}

	d := startDaemon(t, server.Config{StoreDir: home}, server.HandlerOptions{})
	if err := d.svc.Recover(); err != nil {
		t.Fatal(err)
	}
	var pl struct {
		Parked  []server.ParkedInfo
		Damaged []server.DamagedPark
	}
	d.ok(t, "GET", "/v1/parked", nil, 200, &pl)
	if len(pl.Parked) != 1 || pl.Parked[0].SessionID != id || !pl.Parked[0].Expires.Equal(pi.Expires) || len(pl.Damaged) != 0 {
		t.Fatalf("the new daemon's parked list: %+v", pl)
	}
	var info server.SessionInfo
	d.ok(t, "POST", "/v1/parked/"+id+"/resume", nil, 200, &info)
	if info.SessionID != id || info.Rung != "vm" || len(info.HostObjects["db"]) != 1 {
		t.Fatalf("resumed as %+v", info)
	}
	sp := "/v1/sessions/" + id
	var out wire.ShellResult
	d.ok(t, "POST", sp+"/shell", server.ShellRequest{Command: "pwd; echo $X; cat a.txt"}, 200, &out)
	if out.Transcript != "/workspace/d\n1\nhi\n" {
		t.Fatalf("after resume in a new daemon: %+v", out)
	}
	if resp, data := d.do(t, "GET", sp+"/cache/k", nil); resp.StatusCode != 200 || string(data) != "v" {
		t.Fatalf("cache after resume: %d %q", resp.StatusCode, data)
	}
	if _, err := os.Stat(filepath.Join(home, "parked", id)); !os.IsNotExist(err) {
		t.Fatalf("the saved state outlived the resume: %v", err)
	}
	d.ok(t, "GET", "/v1/parked", nil, 200, &pl)
	if len(pl.Parked) != 0 {
		t.Fatalf("still listed after resume: %+v", pl.Parked)
	}
}
