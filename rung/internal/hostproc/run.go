//go:build linux || darwin

// Package hostproc owns running a trial's command as a plain process of
// this host, in a session of its own, as the rungs without a guest in the
// trial do (host, seatbelt): the action's PATH lookup as a shell does it,
// the output's bounded tails, the timeout, the exit status and rusage, and
// killing what the command left in its session before its files are
// walked.
package hostproc

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

// Run runs argv (the action's command, or a wrapper of it such as
// sandbox-exec) with env in dir, in a session of its own, and fills p from
// spec's output cap, stdin, streams and timeout. Once the command has ended
// (or timed out) everything left in its session is killed, so that nothing
// writes to the tree while it is walked; a process that left the session
// survives (there is no boundary here to stop it).
func Run(ctx context.Context, spec dryexec.TrialSpec, argv, env []string, dir string, p *dryexec.Process) error {
	a := spec.Action
	out, errb := tail.New(spec.OutputCap), tail.New(spec.OutputCap)
	defer func() {
		o, otr := out.Bytes()
		e, etr := errb.Bytes()
		p.Stdout, p.StdoutTruncated, p.Stderr, p.StderrTruncated = string(o), otr, string(e), etr
	}()
	path, err := LookPath(argv[0], a.Env["PATH"], dir)
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
		SysProcAttr: attr()}
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
	// watched closes when the watcher is done with timedOut, which is
	// read only after it (the kill that ends Wait orders nothing for the
	// memory model: the race detector saw the write and the read race).
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		var timeout <-chan time.Time
		if a.TimeoutMS > 0 {
			t := time.NewTimer(a.Timeout())
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-timeout:
			timedOut = true
			KillSession(cmd.Process.Pid)
		case <-ctx.Done():
			KillSession(cmd.Process.Pid)
		case <-stop:
		}
	}()
	werr := cmd.Wait()
	p.DurationNS = int64(time.Since(start))
	close(stop)
	<-watched
	KillSession(cmd.Process.Pid)
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

// Environ is vars as exec wants them, sorted.
func Environ(vars map[string]string) []string {
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// LookPath finds name as a shell would with the action's PATH (not ours):
// a name with a slash is taken as it is, relative to dir.
func LookPath(name, pathEnv, dir string) (string, error) {
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
