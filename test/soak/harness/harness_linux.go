package harness

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/internal/cli"
	"github.com/dryexec/dryexec/internal/procfs"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/netsim/netrole"
	"github.com/dryexec/dryexec/server"
)

// asCLI makes the re-executed test binary act as the dryexec binary.
const asCLI = "DRYEXEC_TEST_AS_CLI"

// MarkEnv is set in the daemon's environment (and passed to every trial and
// session by the tests): after the daemon is gone, any process still carrying
// it is a leak, wherever it was reparented to.
const MarkEnv = "DRYEXEC_LEAK_MARK"

// Main is the tests' TestMain: the test binary serves as the guest (the ns
// rung re-executes it) and, re-executed by Start, as the CLI.
func Main(m *testing.M) {
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	if os.Getenv(asCLI) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Run(ctx, os.Args[1:], cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
		stop()
		os.Exit(code)
	}
	testreq.OwnMountNamespace()
	os.Exit(m.Run())
}

// Env is what every process the harness starts gets on top of the test's
// environment: the store, a private TMPDIR (so the daemon's temp dirs can be
// counted apart from other tests'), and the leak mark.
type Env struct {
	Home   string // DRYEXEC_HOME
	TmpDir string // TMPDIR of the daemon and the CLI
	Mark   string // MarkEnv's value
}

// NewEnv makes a fresh store dir, a private TMPDIR and a mark under root.
func NewEnv(t testing.TB, root string) Env {
	t.Helper()
	b := make([]byte, 8)
	rand.Read(b)
	e := Env{Home: filepath.Join(root, "home"), TmpDir: filepath.Join(root, "tmp"), Mark: hex.EncodeToString(b)}
	for _, d := range []string{e.Home, e.TmpDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// Vars is the environment of a process the harness starts.
func (e Env) Vars() []string {
	return append(os.Environ(), asCLI+"=1", "DRYEXEC_HOME="+e.Home, "TMPDIR="+e.TmpDir, MarkEnv+"="+e.Mark,
		// The daemon's sandboxes would otherwise see this machine's PATH
		// with a pyenv shim first (200 ms a start).
		"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
}

// Command returns `dryexec ARGS…` (the test binary as the CLI) in env e.
func (e Env) Command(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = e.Vars()
	return cmd
}

// Daemon is `dryexec serve` in a process of its own.
type Daemon struct {
	Env
	Sock string
	Cmd  *exec.Cmd
	Pid  int
	HTTP *http.Client

	mu   sync.Mutex // guards out
	out  bytes.Buffer
	done chan struct{} // closed once the process has exited
}

// Start runs a daemon on sock in env e and waits until it serves. It is
// SIGKILLed at the end of t if still running.
func Start(t testing.TB, e Env, sock string, extra ...string) *Daemon {
	t.Helper()
	d, err := StartErr(e, sock, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Kill() })
	return d
}

// StartErr is Start without a testing.TB: the caller must Kill or Stop it.
func StartErr(e Env, sock string, extra ...string) (*Daemon, error) {
	cmd := e.Command(append([]string{"serve", "--socket", sock, "--drain", "20s", "--max-trials", "2"}, extra...)...)
	d := &Daemon{Env: e, Sock: sock, Cmd: cmd, done: make(chan struct{})}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			d.mu.Lock()
			d.out.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			if !once && strings.Contains(sc.Text(), "serving on") {
				once = true
				close(ready)
			}
		}
		io.Copy(io.Discard, pr)
	}()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d.Pid = cmd.Process.Pid
	go func() { cmd.Wait(); pw.Close(); close(d.done) }()
	select {
	case <-ready:
	case <-d.done:
		return nil, fmt.Errorf("dryexec serve exited at start: %v\n%s", cmd.ProcessState, d.Output())
	case <-time.After(2 * time.Minute):
		d.Kill()
		return nil, fmt.Errorf("dryexec serve did not start\n%s", d.Output())
	}
	d.HTTP = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "unix", sock)
		},
		MaxIdleConnsPerHost: 8,
	}}
	return d, nil
}

// Output is what the daemon printed so far.
func (d *Daemon) Output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

// Kill SIGKILLs the daemon and waits for it to be reaped.
func (d *Daemon) Kill() {
	d.Cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
	if d.HTTP != nil {
		d.HTTP.CloseIdleConnections()
	}
}

// Stop SIGTERMs the daemon (it drains) and waits, at most within.
func (d *Daemon) Stop(within time.Duration) error {
	if d.HTTP != nil {
		d.HTTP.CloseIdleConnections()
	}
	d.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		if !d.Cmd.ProcessState.Success() {
			return fmt.Errorf("daemon exit: %v\n%s", d.Cmd.ProcessState, d.Output())
		}
		return nil
	case <-time.After(within):
		d.Kill()
		return fmt.Errorf("daemon did not exit within %v of SIGTERM", within)
	}
}

// Done is closed once the daemon process has exited.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// APIError is an error answer of the daemon.
type APIError struct {
	Status int
	server.APIError
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// Do sends a JSON request (body nil or a value) and decodes a 2xx answer into
// out (if not nil). An error answer is an *APIError.
func (d *Daemon) Do(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://dryexec"+path, r)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error server.APIError `json:"error"`
		}
		json.Unmarshal(data, &e)
		if e.Error.Code == "" {
			e.Error.Message = string(data)
		}
		return &APIError{Status: resp.StatusCode, APIError: e.Error}
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: %w in %s", method, path, err, data)
		}
	}
	return nil
}

// Stream posts a streamed trial (NDJSON) and returns its events as they come;
// cancel ctx to close it.
func (d *Daemon) Stream(ctx context.Context, req server.TrialRequest) (<-chan map[string]any, error) {
	j, _ := json.Marshal(req)
	hr, _ := http.NewRequestWithContext(ctx, "POST", "http://dryexec/v1/trials", bytes.NewReader(j))
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/x-ndjson")
	resp, err := d.HTTP.Do(hr)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("stream: %d %s", resp.StatusCode, b)
	}
	ch := make(chan map[string]any, 16)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				ch <- ev
			}
		}
	}()
	return ch, nil
}

// RSS is the daemon's resident set size in bytes (VmRSS), 0 if unreadable.
func RSS(pid int) int64 { return status(pid, "VmRSS:") << 10 }

// Threads is how many threads pid has.
func Threads(pid int) int64 { return status(pid, "Threads:") }

// status reads one numeric field of /proc/PID/status (kB fields in kB).
func status(pid int, field string) int64 {
	v, _ := procfs.FileField("/proc/"+strconv.Itoa(pid)+"/status", field)
	return v
}

// FDs lists the targets of pid's open descriptors (fd number → target).
func FDs(pid int) map[int]string {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, _ := os.ReadDir(dir)
	out := map[int]string{}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		t, _ := os.Readlink(filepath.Join(dir, e.Name()))
		out[n] = t
	}
	return out
}

// FDKinds summarises descriptor targets by kind ("socket", "pipe",
// "anon_inode:[eventpoll]", "net" for network namespaces, "file" for paths).
func FDKinds(fds map[int]string) map[string]int {
	out := map[string]int{}
	for _, t := range fds {
		k := "file"
		switch {
		case strings.HasPrefix(t, "socket:"):
			k = "socket"
		case strings.HasPrefix(t, "pipe:"):
			k = "pipe"
		case strings.HasPrefix(t, "net:"):
			k = "netns"
		case strings.HasPrefix(t, "anon_inode:"):
			k = t
		case strings.HasPrefix(t, "/dev/net/tun"):
			k = "tun"
		}
		out[k]++
	}
	return out
}

// Descendants lists the pids whose parent chain reaches pid.
func Descendants(pid int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := ppid(p); ok {
			parent[p] = pp
		}
	}
	var out []int
	for p := range parent {
		for q, n := parent[p], 0; q > 1 && n < 1000; q, n = parent[q], n+1 {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// ppid reads pid's parent; a zombie counts as gone.
func ppid(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0, false
	}
	var state string
	var pp int
	fmt.Sscanf(s[i+2:], "%s %d", &state, &pp)
	return pp, state != "Z"
}

// Marked lists live processes (not zombies) whose environment carries mark,
// except skip.
func Marked(mark string, skip ...int) []string {
	needle := []byte(MarkEnv + "=" + mark + "\x00")
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == os.Getpid() || slices.Contains(skip, p) {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append(env, 0), needle) {
			continue
		}
		if _, alive := ppid(p); !alive {
			continue
		}
		out = append(out, Describe(p))
	}
	return out
}

// Describe is "pid: cmdline" for messages.
func Describe(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strconv.Itoa(pid) + ": " + strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// WaitGone waits (bounded) until check returns nothing and returns its last
// answer. Exits and kernel teardown are asynchronous; this waits for them
// rather than sleeping a fixed time.
func WaitGone[T any](within time.Duration, check func() []T) []T {
	deadline := time.Now().Add(within)
	for {
		left := check()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}
