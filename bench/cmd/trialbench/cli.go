//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// cliGroup: `dryexec run -- /bin/true` as a user types it, a whole CLI
// process each time: through a running daemon (`dryexec serve`, its warm
// pool) from the front (bin/dryexec of `make build`) and from the engine
// alone (cmd/dryexec, what `go run` builds), and without a daemon
// (in-process, cold: the local engine, and the engine alone), against
// bwrap's cold sandbox in the same run; the same
// trial as one API request from this process (the daemon's own time), the
// same for `/bin/sh -c /bin/true` (what the SDK runs for the str
// "/bin/true": its row's match), and through the Python SDK in a running
// interpreter; with `dryexec --help`
// (the front, then the engine's start) and fork+exec for scale. The issue's
// targets: with a daemon ≤ 0.5 × bwrap, without ≤ 3 ×, the SDK ≤ 2 ms.
// Before each run through the daemon, unmeasured, the benchmark waits until
// the daemon's pool has a sandbox ready and nothing in flight, as the warm
// group does; the pool's hits and misses are reported.
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
	type poolStats struct{ Ready, Settled, Busy, Hits, Misses, Failed int }
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
	// The pooled trial alone, in this process and in the same rounds: the
	// floor of the rows through the daemon. Its spec is the request's
	// (cwd /), its pool as large as the daemon's.
	spec := dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"/bin/true"}, Cwd: "/", Env: benchEnv}}
	pool, err := linuxns.NewPool(e.ctx, &linuxns.Rung{}, linuxns.PoolOptions{Size: 2, IdleTimeout: -1, Spec: spec})
	if err != nil {
		stop()
		return nil, err
	}
	stop = func() {
		pool.Close()
		serve.Process.Signal(syscall.SIGTERM)
		serve.Wait()
	}
	// quiet waits until both pools have a sandbox ready, every ready one
	// settled (its command stub started: a trial taken sooner waits for
	// that), and nothing in flight (a teardown, a refill), so that no
	// candidate shares the CPUs with the other pool's background work and
	// each row is a trial as a user gets it between two commands.
	quiet := func() error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, err := health()
			if own := pool.Stats(); err == nil && st.Ready > 0 && st.Settled == st.Ready && st.Busy == 0 &&
				own.Ready > 0 && own.Settled == own.Ready && own.Busy == 0 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the daemon's pool or this process's not ready and quiet after 30 s: %+v %+v %v", st, pool.Stats(), err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := quiet(); err != nil {
		stop()
		return nil, err
	}
	withDaemon := append(vars, "DRYEXEC_SOCKET="+sock)
	sdk, err := startSDKLoop(withDaemon)
	if err != nil {
		stop()
		return nil, err
	}
	var st poolStats
	var own linuxns.PoolStats
	g := group{key: "cli", title: "dryexec run -- /bin/true from the shell: with a daemon, without, vs bwrap", unit: unitMS,
		close: func() { st, _ = health(); own = pool.Stats(); sdk.close(); stop() }}
	g.cands = []candidate{
		{name: "dryexec run -- /bin/true, a daemon running (--via daemon; bin/dryexec, the small front)", label: "daemon", prep: quiet,
			run: timed(e.commandEnv(e.empty, withDaemon, e.bin, "run", "--via", "daemon", "--", "/bin/true"))},
		{name: "the same from the Go front (dryexec-front: POST /v1/trials from a Go process)", label: "go-front", prep: quiet,
			run: timed(e.commandEnv(e.empty, withDaemon, e.goFront, "run", "--via", "daemon", "--", "/bin/true"))},
		{name: "the same from the engine alone (dryexec-engine: cmd/dryexec, what go run builds)", label: "engine", prep: quiet,
			run: timed(e.commandEnv(e.empty, withDaemon, e.engine, "run", "--via", "daemon", "--", "/bin/true"))},
		{name: "POST /v1/trials (/bin/true) from this process: the daemon's own time, no CLI process", label: "api", prep: quiet,
			run: timed(func() error { return postTrial(hc, "/bin/true") })},
		{name: "Pool.Trial(/bin/true) in this process, a sandbox ready: the pooled trial alone, the floor of the row above", label: "pooled", prep: quiet,
			run: timed(func() error { return checkDelta(pool.Trial(e.ctx, spec)) })},
		{name: "POST /v1/trials (/bin/sh -c /bin/true, what the SDK's str form runs) from this process", label: "api-sh", prep: quiet,
			run: timed(func() error { return postTrial(hc, "/bin/sh", "-c", "/bin/true") })},
		{name: `Python SDK: dry_exec.run("/bin/true") through the daemon (a running interpreter, timed in it)`, label: "sdk", prep: quiet,
			run: sdk.run},
		// The no-daemon rows wait, unmeasured, for the daemon's pool to be
		// ready and idle too: the row after a daemon row otherwise shares
		// the CPUs with the used sandbox's teardown and the pool's refill.
		{name: "dryexec run -- /bin/true, no daemon (--via local: the small front, then dryexec-local in-process)", label: "local", prep: quiet,
			run: timed(e.commandEnv(e.empty, vars, e.bin, "run", "--via", "local", "--", "/bin/true"))},
		{name: "the same from the engine alone (dryexec-engine run --via local: the whole CLI in-process)", label: "local-engine", prep: quiet,
			run: timed(e.commandEnv(e.empty, vars, e.engine, "run", "--via", "local", "--", "/bin/true"))},
		{name: "bwrap --ro-bind / / --unshare-all --dev /dev --proc /proc /bin/true", run: timed(e.command(e.empty, "bwrap", "--ro-bind", "/", "/", "--unshare-all", "--dev", "/dev", "--proc", "/proc", "/bin/true"))},
		{name: "dryexec --help (the small front, the Go front, then the engine's process start)", run: timed(e.commandEnv(e.empty, vars, e.bin, "--help"))},
		{name: "fork+exec /bin/true", run: timed(e.command(e.empty, "/bin/true"))},
	}
	// Every round, bwrap's too, starts after the machine has been idle a
	// moment, as a command typed at a prompt does: back to back (or right
	// after quiet's polling) the CPUs never idle and the kernel's RCU state
	// stays warm, which hid ≈ 7 ms of a run without a daemon (a cgroup v1
	// move waiting for a grace period: docs/benchmarks.md, "Idle between
	// runs").
	for i := range g.cands {
		prep := g.cands[i].prep
		g.cands[i].prep = func() error {
			if prep != nil {
				if err := prep(); err != nil {
					return err
				}
			}
			time.Sleep(cliIdle)
			return nil
		}
	}
	// The baseline is bwrap's row, wherever it is in the list.
	g.bases = []int{slices.IndexFunc(g.cands, func(c candidate) bool { return strings.HasPrefix(c.name, "bwrap ") })}
	g.extra = func() string {
		return fmt.Sprintf("The daemon's pool: %d hits, %d misses (a miss ran cold), %d failed preparations; this process's pool: %d hits, %d misses. Targets (the issue): with a daemon ≤ 0.50 × bwrap, without ≤ 3.00 ×; the SDK ≤ 2 ms.",
			st.Hits, st.Misses, st.Failed, own.Hits, own.Misses)
	}
	return []group{g}, nil
}

// cliIdle is how long the machine idles before each round of the cli group.
const cliIdle = 30 * time.Millisecond

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

// postTrial runs argv through the daemon's API from this process, as the
// SDK's plain call does (one JSON answer).
func postTrial(hc *http.Client, argv ...string) error {
	body, err := json.Marshal(map[string]any{"argv": argv, "cwd": "/"})
	if err != nil {
		return err
	}
	resp, err := hc.Post("http://dryexec/v1/trials", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusCreated {
		err = fmt.Errorf("POST /v1/trials: %s: %s", resp.Status, b)
	}
	return err
}

// sdkLoopPy runs dry_exec.run("/bin/true") once per line read, and writes
// how long the call took (ms): the SDK's round trip in a running
// interpreter, without Python's start-up.
const sdkLoopPy = `
import sys, time
sys.path.insert(0, sys.argv[1])
import dry_exec
for _ in sys.stdin:
    t = time.perf_counter()
    d = dry_exec.run("/bin/true")
    ms = (time.perf_counter() - t) * 1000
    print(ms if d.exit_code == 0 else -1, flush=True)
`

// sdkLoop is a python3 running sdkLoopPy.
type sdkLoop struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startSDKLoop(vars []string) (*sdkLoop, error) {
	dir, err := filepath.Abs("sdk/python")
	if err != nil {
		return nil, err
	}
	c := exec.Command("/usr/bin/python3", "-c", sdkLoopPy, dir)
	c.Env, c.Stderr = vars, os.Stderr
	in, err := c.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	return &sdkLoop{cmd: c, in: in, out: bufio.NewScanner(out)}, nil
}

func (l *sdkLoop) run() (float64, error) {
	if _, err := io.WriteString(l.in, "\n"); err != nil {
		return 0, err
	}
	if !l.out.Scan() {
		return 0, fmt.Errorf("the SDK loop ended: %v", l.out.Err())
	}
	ms, err := strconv.ParseFloat(l.out.Text(), 64)
	if err == nil && ms < 0 {
		err = errors.New(`dry_exec.run("/bin/true") did not exit 0`)
	}
	return ms, err
}

func (l *sdkLoop) close() {
	l.in.Close()
	l.cmd.Wait()
}
