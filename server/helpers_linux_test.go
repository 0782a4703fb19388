package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/internal/testwait"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/server"
)

func requireNS(t testing.TB) {
	t.Helper()
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
}

// daemon is a real server on a temp unix socket (in-process), with a client.
type daemon struct {
	svc    *server.Service
	sock   string
	home   string
	client *http.Client
	base   string
	token  string
}

func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		MaxIdleConnsPerHost: 64,
	}}
}

// startDaemon serves a fresh store on a temp socket until t ends.
func startDaemon(t testing.TB, cfg server.Config, hopt server.HandlerOptions) *daemon {
	t.Helper()
	dir := t.TempDir()
	if cfg.StoreDir == "" {
		cfg.StoreDir = filepath.Join(dir, "home")
	}
	if cfg.Getenv == nil {
		cfg.Getenv = func(k string) string {
			if k == "PATH" {
				return "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
			}
			return ""
		}
	}
	if cfg.Socket == "" {
		// As `dryexec serve --socket` does: the daemon hides it.
		cfg.Socket = filepath.Join(dir, "d.sock")
	}
	svc, err := server.NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{svc: svc, sock: cfg.Socket, home: cfg.StoreDir}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, svc, server.ServeOptions{Socket: d.sock, Handler: hopt, Drain: 5 * time.Second, Ready: func(a string) { ready <- a }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	d.client, d.base = unixClient(d.sock), "http://dryexec"
	return d
}

// do sends a request; body may be nil, a []byte (sent raw) or a value (JSON).
func (d *daemon) do(t testing.TB, method, path string, body any) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	ct := ""
	switch b := body.(type) {
	case nil:
	case []byte:
		r, ct = bytes.NewReader(b), "application/json"
	case string:
		r, ct = strings.NewReader(b), "application/json"
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r, ct = bytes.NewReader(j), "application/json"
	}
	req, err := http.NewRequest(method, d.base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if d.token != "" {
		req.Header.Set("Authorization", "Bearer "+d.token)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, data
}

// ok sends a request that must succeed with want and decodes its answer.
func (d *daemon) ok(t testing.TB, method, path string, body any, want int, out any) {
	t.Helper()
	resp, data := d.do(t, method, path, body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, data, want)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
}

type apiErr struct {
	Error server.APIError `json:"error"`
}

// fails sends a request that must be refused with status and code.
func (d *daemon) fails(t testing.TB, method, path string, body any, status int, code string) server.APIError {
	t.Helper()
	resp, data := d.do(t, method, path, body)
	var e apiErr
	json.Unmarshal(data, &e)
	if resp.StatusCode != status || e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("%s %s: %d %s, want %d %s with a message", method, path, resp.StatusCode, data, status, code)
	}
	return e.Error
}

func (d *daemon) trial(t testing.TB, cwd string, argv ...string) *dryexec.StateDelta {
	t.Helper()
	var delta dryexec.StateDelta
	d.ok(t, "POST", "/v1/trials", server.TrialRequest{Argv: argv, Cwd: cwd}, http.StatusCreated, &delta)
	return &delta
}

// stream posts a streamed trial and returns a reader of its events.
func (d *daemon) stream(t testing.TB, ctx context.Context, req server.TrialRequest) (*bufio.Scanner, func()) {
	t.Helper()
	j, _ := json.Marshal(req)
	hr, _ := http.NewRequestWithContext(ctx, "POST", d.base+"/v1/trials", bytes.NewReader(j))
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/x-ndjson")
	resp, err := d.client.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 64<<20)
	return sc, func() { resp.Body.Close() }
}

type event struct {
	Event   string              `json:"event"`
	TrialID string              `json:"trial_id"`
	Data    string              `json:"data"`
	Delta   *dryexec.StateDelta `json:"delta"`
	Error   *server.APIError    `json:"error"`
}

func nextEvent(t testing.TB, sc *bufio.Scanner) event {
	t.Helper()
	if !sc.Scan() {
		t.Fatalf("stream ended: %v", sc.Err())
	}
	var e event
	if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
		t.Fatalf("event %q: %v", sc.Bytes(), err)
	}
	return e
}

// proc is `dryexec serve` in a process of its own (the test binary as the CLI).
type proc struct {
	cmd  *exec.Cmd
	sock string
	home string
	out  *bytes.Buffer
	done chan struct{} // closed when the process has exited; err is then set
	err  error
}

func startProc(t testing.TB, home, sock string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "serve", "--socket", sock, "--drain", "20s")
	cmd.Env = append(os.Environ(), asCLI+"=1", "DRYEXEC_HOME="+home)
	p := &proc{cmd: cmd, sock: sock, home: home, out: &bytes.Buffer{}, done: make(chan struct{})}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			p.out.WriteString(sc.Text() + "\n")
			if !once && strings.Contains(sc.Text(), "serving on") {
				once = true
				close(ready)
			}
		}
	}()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); pw.Close(); close(p.done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
	})
	select {
	case <-ready:
	case <-p.done:
		t.Fatalf("dryexec serve exited: %v\n%s", p.err, p.out)
	case <-time.After(time.Minute):
		t.Fatalf("dryexec serve did not start\n%s", p.out)
	}
	return p
}

func (p *proc) client() *daemon {
	return &daemon{sock: p.sock, home: p.home, client: unixClient(p.sock), base: "http://dryexec"}
}

// descendants lists the pids whose parent chain reaches pid.
func descendants(pid int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var p int
		if _, err := fmt.Sscanf(e.Name(), "%d", &p); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		var state string
		var ppid int
		fmt.Sscanf(s[i+2:], "%s %d", &state, &ppid)
		parent[p] = ppid
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// gone waits (bounded) until none of pids exists or is anything but a zombie.
func gone(pids []int, within time.Duration) []int {
	var left []int
	testwait.Until(within, func() bool {
		left = nil
		for _, p := range pids {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
			if err == nil {
				s := string(b)
				if i := strings.LastIndexByte(s, ')'); i > 0 && i+2 < len(s) && s[i+2] != 'Z' {
					left = append(left, p)
				}
			}
		}
		return len(left) == 0
	})
	return left
}
