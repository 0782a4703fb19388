//go:build linux || darwin

package seatbelt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/tail"
)

// run runs argv (the action's command, wrapped in sandbox-exec on macOS)
// with env in dir, in a session of its own, and fills p. Once the command
// has ended (or timed out) everything left in its session is killed, so
// that nothing writes to the clone while it is walked.
func run(ctx context.Context, spec dryexec.TrialSpec, argv, env []string, dir string, p *dryexec.Process) error {
	a := spec.Action
	out, errb := tail.New(spec.OutputCap), tail.New(spec.OutputCap)
	defer func() {
		o, otr := out.Bytes()
		e, etr := errb.Bytes()
		p.Stdout, p.StdoutTruncated, p.Stderr, p.StderrTruncated = string(o), otr, string(e), etr
	}()
	path, err := lookPath(argv[0], a.Env["PATH"], dir)
	if err != nil {
		// As a shell reports it: 127 not found, 126 not executable.
		p.ExitCode = 127
		if errors.Is(err, fs.ErrPermission) {
			p.ExitCode = 126
		}
		fmt.Fprintf(errb, "dryexec: %s: %v\n", argv[0], err)
		return nil
	}
	// Pipes of our own, not exec's copiers: Wait would wait for every
	// holder of the write ends, a backgrounded process included.
	or, ow, err := os.Pipe()
	if err != nil {
		return err
	}
	er, ew, err := os.Pipe()
	if err != nil {
		or.Close()
		ow.Close()
		return err
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Dir: dir, Stdin: spec.Stdin, Stdout: ow, Stderr: ew,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	var copies sync.WaitGroup
	for _, c := range []struct {
		r *os.File
		w io.Writer
	}{{or, out.Tee(spec.Stdout)}, {er, errb.Tee(spec.Stderr)}} {
		copies.Add(1)
		go func() {
			defer copies.Done()
			io.Copy(c.w, c.r)
			c.r.Close()
		}()
	}
	start := time.Now()
	err = cmd.Start()
	ow.Close()
	ew.Close()
	if err != nil {
		copies.Wait()
		p.ExitCode = 126
		fmt.Fprintf(errb, "dryexec: %s: %v\n", argv[0], err)
		return nil
	}
	var timedOut bool
	stop := make(chan struct{})
	go func() {
		var timeout <-chan time.Time
		if a.TimeoutMS > 0 {
			t := time.NewTimer(a.Timeout())
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-timeout:
			timedOut = true
			killSession(cmd.Process.Pid)
		case <-ctx.Done():
			killSession(cmd.Process.Pid)
		case <-stop:
		}
	}()
	werr := cmd.Wait()
	p.DurationNS = int64(time.Since(start))
	close(stop)
	killSession(cmd.Process.Pid)
	copies.Wait()
	st := cmd.ProcessState
	if st == nil {
		return werr
	}
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		p.CPUUserNS, p.CPUSysNS = syscall.TimevalToNsec(ru.Utime), syscall.TimevalToNsec(ru.Stime)
		p.PeakRSSBytes = maxRSSBytes(ru)
	}
	ws := st.Sys().(syscall.WaitStatus)
	switch {
	case timedOut:
		p.ExitCode, p.Signal, p.TimedOut = 124, "SIGKILL", true
	case ws.Signaled():
		p.ExitCode, p.Signal = 128+int(ws.Signal()), unix.SignalName(ws.Signal())
	default:
		p.ExitCode = ws.ExitStatus()
	}
	return ctx.Err()
}

// killSession kills the process group the command leads.
func killSession(pid int) { syscall.Kill(-pid, syscall.SIGKILL) }

// environ is the action's environment as exec wants it, sorted, with
// TMPDIR pointed at the sandbox's private tmp: the profile lets nothing
// write to the host's /tmp, and tools that make temp files (sort, cc, a
// shell's here-documents) follow TMPDIR. The delta still records the
// action's own environment.
func environ(a dryexec.Action, tmp string) []string {
	env := make([]string, 0, len(a.Env)+1)
	for k, v := range a.Env {
		if k != "TMPDIR" {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, "TMPDIR="+tmp)
	sort.Strings(env)
	return env
}

// lookPath finds name as a shell would with the action's PATH (not ours):
// a name with a slash is taken as it is, relative to dir.
func lookPath(name, pathEnv, dir string) (string, error) {
	check := func(p string) error {
		full := p
		if !filepath.IsAbs(full) {
			full = filepath.Join(dir, p)
		}
		st, err := os.Stat(full)
		if err != nil {
			return err
		}
		if st.IsDir() || unix.Access(full, unix.X_OK) != nil {
			return fs.ErrPermission
		}
		return nil
	}
	if strings.Contains(name, "/") {
		return name, check(name)
	}
	if pathEnv == "" {
		pathEnv = "/usr/local/bin:/usr/bin:/bin"
	}
	denied := false
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		switch err := check(p); {
		case err == nil:
			if !filepath.IsAbs(p) {
				p = "./" + p
			}
			return p, nil
		case errors.Is(err, fs.ErrPermission):
			denied = true
		}
	}
	if denied {
		return "", fs.ErrPermission
	}
	return "", errors.New("command not found")
}
