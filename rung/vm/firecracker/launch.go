package firecracker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// LaunchSpec is how one Firecracker process is started.
type LaunchSpec struct {
	// Binary is the firecracker executable.
	Binary string
	// APISock is the API socket's path as Firecracker sees it: under the
	// jailer, inside the jail (HostAPISock is the host's path).
	APISock string
	// ID is the instance's id (the jailer's --id; GET / reports it).
	// Required with the jailer: 1-64 of [A-Za-z0-9-].
	ID string
	// Jailer, when set, starts Firecracker under the jailer.
	Jailer *Jailer
	// Output receives the process's stdout and stderr (Firecracker's log
	// and the guest's serial console); nil discards them.
	Output io.Writer
}

// Jailer is the jailer's part of a launch (docs/jailer.md of Firecracker).
// Paths given to the API (kernel, drives, snapshots, the vsock socket)
// are then inside the jail: the caller links them into ChrootDir.
type Jailer struct {
	// Binary is the jailer executable.
	Binary   string
	UID, GID int
	// ChrootBaseDir is where jails are made; empty: /srv/jailer.
	ChrootBaseDir string
	// NetNS is a network namespace to join (a path), if any.
	NetNS string
	// CgroupVersion is 1 or 2; 0 leaves the jailer's default.
	CgroupVersion int
}

// DefaultChrootBase is the jailer's default --chroot-base-dir.
const DefaultChrootBase = "/srv/jailer"

// ChrootDir is the jail's root on the host:
// <chroot base>/<exec file name>/<id>/root.
func (s LaunchSpec) ChrootDir() string {
	if s.Jailer == nil {
		return ""
	}
	return filepath.Join(cmp.Or(s.Jailer.ChrootBaseDir, DefaultChrootBase), filepath.Base(s.Binary), s.ID, "root")
}

// HostAPISock is the API socket's path on the host.
func (s LaunchSpec) HostAPISock() string {
	if s.Jailer == nil {
		return s.APISock
	}
	return filepath.Join(s.ChrootDir(), s.APISock)
}

// errBadSpec: a launch Firecracker or the jailer would refuse.
var errBadSpec = errors.New("bad launch spec")

// Argv is the command line: `firecracker --api-sock PATH [--id ID]`, or
// the jailer's with Firecracker's arguments after "--".
func (s LaunchSpec) Argv() ([]string, error) {
	if s.Binary == "" || s.APISock == "" {
		return nil, fmt.Errorf("%w: the binary and the API socket are required", errBadSpec)
	}
	if s.ID != "" || s.Jailer != nil {
		if err := checkInstanceID(s.ID); err != nil {
			return nil, err
		}
	}
	fc := []string{"--api-sock", s.APISock}
	if s.Jailer == nil {
		argv := append([]string{s.Binary}, fc...)
		if s.ID != "" {
			argv = append(argv, "--id", s.ID)
		}
		return argv, nil
	}
	j := s.Jailer
	if j.Binary == "" {
		return nil, fmt.Errorf("%w: the jailer's binary is required", errBadSpec)
	}
	// The jailer refuses an exec file whose name lacks "firecracker".
	if !strings.Contains(filepath.Base(s.Binary), "firecracker") {
		return nil, fmt.Errorf("%w: the jailer execs only a file named *firecracker*, not %q", errBadSpec, s.Binary)
	}
	if !filepath.IsAbs(s.APISock) {
		return nil, fmt.Errorf("%w: under the jailer the API socket is an absolute path inside the jail", errBadSpec)
	}
	argv := []string{j.Binary, "--id", s.ID, "--exec-file", s.Binary,
		"--uid", strconv.Itoa(j.UID), "--gid", strconv.Itoa(j.GID)}
	if j.ChrootBaseDir != "" {
		argv = append(argv, "--chroot-base-dir", j.ChrootBaseDir)
	}
	if j.NetNS != "" {
		argv = append(argv, "--netns", j.NetNS)
	}
	if j.CgroupVersion != 0 {
		argv = append(argv, "--cgroup-version", strconv.Itoa(j.CgroupVersion))
	}
	// No --daemonize: the process stays dryexec's child, so that it can be
	// killed and waited for, and dies with dryexec (Pdeathsig).
	return append(append(argv, "--"), fc...), nil
}

// checkInstanceID keeps an id to what the jailer accepts.
func checkInstanceID(id string) error {
	ok := id != "" && len(id) <= 64
	for _, r := range id {
		ok = ok && (r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}
	if !ok {
		return fmt.Errorf("%w: instance id %q: 1-64 of [A-Za-z0-9-]", errBadSpec, id)
	}
	return nil
}

// Process is a started VMM process.
type Process interface {
	// Pid is its process id.
	Pid() int
	// Done is closed once it has ended; Err then says how.
	Done() <-chan struct{}
	Err() error
	// Kill ends it (SIGKILL); Done then closes.
	Kill() error
}

// Launcher starts VMM processes. ExecLauncher is the real one; a test
// may substitute the process and keep the real HTTP on the socket.
type Launcher interface {
	Launch(ctx context.Context, spec LaunchSpec) (Process, error)
}

// ExecLauncher starts spec.Argv() as a child process. The process is not
// bound to ctx: it lives until killed (a VM outlives the call that
// started it), and dies with dryexec on Linux.
type ExecLauncher struct{}

// Launch implements Launcher.
func (ExecLauncher) Launch(ctx context.Context, spec LaunchSpec) (Process, error) {
	argv, err := spec.Argv()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = spec.Output, spec.Output
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	p := &execProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

type execProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (p *execProcess) Pid() int              { return p.cmd.Process.Pid }
func (p *execProcess) Done() <-chan struct{} { return p.done }

func (p *execProcess) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

func (p *execProcess) Kill() error {
	err := p.cmd.Process.Kill()
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// waitAPI polls GET / until the API answers, the process ends or ctx
// ends. The socket appears some time after the process starts, and a
// socket file may exist a moment before it accepts.
func waitAPI(ctx context.Context, c *Client, p Process, tail func() string) (InstanceInfo, error) {
	wait := 2 * time.Millisecond
	for {
		info, err := c.InstanceInfo(ctx)
		if err == nil {
			return info, nil
		}
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			// It answered, but not as Firecracker does.
			return InstanceInfo{}, err
		}
		t := time.NewTimer(wait)
		select {
		case <-p.Done():
			t.Stop()
			return InstanceInfo{}, fmt.Errorf("%w (%v)%s", ErrExited, p.Err(), tail())
		case <-ctx.Done():
			t.Stop()
			return InstanceInfo{}, fmt.Errorf("%w at %s: %w (last: %v)%s", ErrNoSocket, c.Socket(), context.Cause(ctx), err, tail())
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}
