//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// cliGroup: `dryexec run -- /bin/true` as a user types it, a whole CLI
// process each time: through a running daemon (`dryexec serve`, its warm
// pool), and without one (in-process, cold), against bwrap's cold sandbox in
// the same run; with `dryexec --help`, the CLI's process start alone, and
// fork+exec for scale. The targets: with a daemon ≤ 0.5 × bwrap,
// without ≤ 3 ×. Before each run through the daemon, unmeasured, the
// benchmark waits until the daemon's pool has a sandbox ready and nothing in
// flight, as the warm group does; the pool's hits and misses are reported.
func cliGroup(e *env) ([]group, error) {
	home := filepath.Join(e.work, "home")
	sock := filepath.Join(e.work, "serve.sock")
	vars := []string{"PATH=/usr/bin:/bin", "DRYEXEC_HOME=" + home}
	serve := exec.Command(e.bin, "serve", "--socket", sock, "--pool", "2")
	serve.Env, serve.Stdout, serve.Stderr = vars, io.Discard, io.Discard
	serve.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := serve.Start(); err != nil {
		return nil, err
	}
	stop := func() {
		serve.Process.Signal(syscall.SIGTERM)
		serve.Wait()
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	type poolStats struct{ Ready, Busy, Hits, Misses, Failed int }
	health := func() (poolStats, error) {
		var h struct {
			Pool poolStats `json:"pool"`
		}
		resp, err := hc.Get("http://dryexec/v1/health")
		if err != nil {
			return h.Pool, err
		}
		defer resp.Body.Close()
		return h.Pool, json.NewDecoder(resp.Body).Decode(&h)
	}
	quiet := func() error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, err := health()
			if err == nil && st.Ready > 0 && st.Busy == 0 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the daemon's pool not ready and quiet after 30 s: %+v %v", st, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := quiet(); err != nil {
		stop()
		return nil, err
	}
	withDaemon := append(vars, "DRYEXEC_SOCKET="+sock)
	var st poolStats
	g := group{key: "cli", title: "dryexec run -- /bin/true from the shell: with a daemon, without, vs bwrap", unit: unitMS, bases: []int{2},
		close: func() { st, _ = health(); stop() }}
	g.cands = []candidate{
		{name: "dryexec run -- /bin/true, a daemon running (--via daemon, its warm pool)", label: "daemon", prep: quiet,
			run: timed(e.commandEnv(e.empty, withDaemon, e.bin, "run", "--via", "daemon", "--", "/bin/true"))},
		{name: "dryexec run -- /bin/true, no daemon (--via local, in-process)", label: "local",
			run: timed(e.commandEnv(e.empty, vars, e.bin, "run", "--via", "local", "--", "/bin/true"))},
		{name: "bwrap --ro-bind / / --unshare-all --dev /dev --proc /proc /bin/true", run: timed(e.command(e.empty, "bwrap", "--ro-bind", "/", "/", "--unshare-all", "--dev", "/dev", "--proc", "/proc", "/bin/true"))},
		{name: "dryexec --help (the CLI's process start alone)", run: timed(e.commandEnv(e.empty, vars, e.bin, "--help"))},
		{name: "fork+exec /bin/true", run: timed(e.command(e.empty, "/bin/true"))},
	}
	g.extra = func() string {
		return fmt.Sprintf("The daemon's pool: %d hits, %d misses (a miss ran cold), %d failed preparations. Targets (the issue): with a daemon ≤ 0.50 × bwrap, without ≤ 3.00 ×.",
			st.Hits, st.Misses, st.Failed)
	}
	return []group{g}, nil
}

// commandEnv runs argv in dir (outside any sandbox) with exactly the
// variables vars, output discarded; a non-zero exit fails the row.
func (e *env) commandEnv(dir string, vars []string, argv ...string) func() error {
	return func() error {
		c := exec.Command(argv[0], argv[1:]...)
		c.Dir, c.Env = dir, vars
		c.Stdout, c.Stderr = io.Discard, io.Discard
		if err := c.Run(); err != nil {
			return fmt.Errorf("%v: %w", argv, err)
		}
		return nil
	}
}
