package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fsdelta"
	"github.com/dryexec/dryexec/wire"
)

var _ dryexec.SandboxForker[wire.SessionStart, wire.Fork, wire.Forked, wire.ForkAdopt] = (*sessionSandbox)(nil)

// PrepareFork implements dryexec.SandboxForker, for a session on an image
// (a memSessionSandbox forks by checkpoint instead): the workspace is a
// tmpfs in this sandbox's gVisor kernel (the sentry's memory), which no
// other sandbox can mount, so there is no layer to share as on ns. The
// guest instead streams the workspace and its baseline to the host
// (Stream), every other process of the session stopped meanwhile, and the
// host pushes them into each branch.
func (s *sessionSandbox) PrepareFork(n int, req *wire.Fork) error {
	req.N, req.Stream = n, true
	return nil
}

// DropFork implements dryexec.SandboxForker: a fork leaves nothing here.
func (s *sessionSandbox) DropFork() {}

// OpenFork implements dryexec.SandboxForker: a new gvisor session sandbox
// (its own runsc, cgroup, masks and netsim), into which the host pushes
// the parent's trees before its adopt.
func (s *sessionSandbox) OpenFork(ctx context.Context, spec dryexec.SandboxSpec, _ *wire.Forked, _ int, _ *wire.ForkAdopt) (dryexec.Sandbox[wire.SessionStart], error) {
	return s.r.OpenSandbox(ctx, spec)
}

// memSessionSandbox is a session sandbox on the host's view, whose guest
// reads its control socket from runsc's stdin: it forks with memory. A
// fork checkpoints the running sandbox (runsc checkpoint --leave-running:
// gVisor's kernel, the workspace's tmpfs and baseline in it, every process
// of the session) and restores each branch from that in a sandbox of its
// own (Rung.Resume): the workspace is not copied file by file, and
// processes a command left running go on in every branch. What the session
// wrote outside its workspace (the view's upper dirs: /tmp, $HOME) is
// copied, and each branch's view starts from that copy: the restored
// kernel expects every file it knew to be there.
type memSessionSandbox struct{ *sessionSandbox }

// Where a fork's dir (package session's, empty) holds the saved state.
const (
	kernelDir  = "kernel"      // runsc checkpoint's image
	uppersDir  = "uppers"      // a copy of the view's upper dirs (scratch/u)
	uppersPlan = "uppers.json" // the host paths they stand for, in order
)

// Snapshot saves the running sandbox to dir and lets it run on. runsc's
// state, its bundle and its control socket are the view guest's (a mount
// and a network namespace of its own, runsc's working dir there): the
// checkpoint runs in them, and names dir through this process's root,
// which the view guest's scratch tmpfs may cover. The upper dirs are
// copied after it, the sandbox still paused (every process of the session,
// not only the parked guest), so the copy is of the moment checkpointed.
func (s *memSessionSandbox) Snapshot(ctx context.Context, dir string) error {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return fmt.Errorf("checkpointing the gvisor sandbox: %w", err)
	}
	img, err := viaRoot(filepath.Join(dir, kernelDir))
	if err != nil {
		return err
	}
	runsc := func(ctx context.Context, args ...string) error {
		argv := append([]string{nsenter, "--target", strconv.Itoa(s.Cmd.Process.Pid), "--mount", "--net", "--wd", "--"}, s.runscArgv()...)
		argv = append(append(argv, s.r.RunscFlags...), args...)
		if err := run(ctx, append(argv, s.container())); err != nil {
			return fmt.Errorf("runsc %s: %w", args[0], err)
		}
		return nil
	}
	// The sandbox is paused from before the checkpoint until its upper
	// dirs are copied: the copy (cp, on the host, by path) then walks a
	// tree nothing changes. Running, a process of the session could swap a
	// dir cp had entered with a symlink (renameat2 RENAME_EXCHANGE), and
	// cp would read the host's file it names, past the masks, into every
	// branch (TestForkCopySwapRace); and the restored kernel could miss a
	// file it knew.
	if err := runsc(ctx, "pause"); err != nil {
		return err
	}
	err = s.checkpoint(ctx, runsc, img, dir)
	if rerr := runsc(context.WithoutCancel(ctx), "resume"); err == nil {
		err = rerr
	}
	return err
}

// checkpoint saves the paused sandbox's kernel to img, and its upper dirs
// and their host paths to dir.
func (s *memSessionSandbox) checkpoint(ctx context.Context, runsc func(context.Context, ...string) error, img, dir string) error {
	if err := runsc(ctx, "checkpoint", "--image-path", img, "--leave-running"); err != nil {
		return err
	}
	plan, err := json.Marshal(upperPaths(s.Uppers))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, uppersPlan), plan, 0o600); err != nil {
		return err
	}
	if err := run(ctx, []string{"cp", "-a", "--", s.scratchPath("u"), filepath.Join(dir, uppersDir)}); err != nil {
		return fmt.Errorf("copying the view's upper dirs: %w", err)
	}
	return nil
}

// seedUppers has the view guest start this sandbox's upper dirs from the
// copy a Snapshot saved (wire.TrialStart.SeedUppers), before it mounts the
// overlays: an overlay's upper may not change under it.
func (b *box) seedUppers(start *wire.TrialStart) error {
	seed, err := viaRoot(filepath.Join(b.restoreFrom, uppersDir))
	if err != nil {
		return err
	}
	if err := b.parentMounts(); err != nil {
		return err
	}
	start.SeedUppers, start.Mounts = seed, b.Mounts
	return nil
}

// parentMounts narrows the branch's view to the host mounts the parent's
// view was built over. A mount that appeared on the host since (a tool's
// tmpfs, an automount) is not in the parent's view, so the branch leaves it
// out too: the restored kernel then sees the same tree. A mount of the
// parent's that is gone cannot be rebuilt, and the fork is refused.
func (b *box) parentMounts() error {
	paths, err := b.savedPlan()
	if err != nil {
		return err
	}
	var kept []wire.MountSpec
	for _, m := range b.Mounts {
		if slices.Contains(paths, m.Path) {
			kept = append(kept, m)
		}
	}
	if len(kept) != len(paths) {
		return fmt.Errorf("%w: a host mount of the parent's view is gone (%q, now %q)", errForkView, paths, mountPaths(b.Mounts))
	}
	b.Mounts = kept
	return nil
}

// savedPlan reads the host paths of the parent's upper dirs, in order.
func (b *box) savedPlan() ([]string, error) {
	plan, err := os.ReadFile(filepath.Join(b.restoreFrom, uppersPlan))
	if err != nil {
		return nil, fmt.Errorf("%w: the fork's saved view: %v", dryexec.ErrGuest, err)
	}
	var paths []string
	if err := json.Unmarshal(plan, &paths); err != nil {
		return nil, fmt.Errorf("%w: the fork's saved view: %v", dryexec.ErrGuest, err)
	}
	return paths, nil
}

func mountPaths(ms []wire.MountSpec) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Path
	}
	return out
}

// checkUppers requires the view built from the seed to have the parent's
// mount plan: a seed upper dir under another host path would put the
// parent's writes elsewhere, and the restored kernel would miss files.
func (b *box) checkUppers() error {
	paths, err := b.savedPlan()
	if err != nil {
		return err
	}
	if !slices.Equal(paths, upperPaths(b.Uppers)) {
		return fmt.Errorf("%w: the branch's view is not the parent's (%q, now %q)", errForkView, paths, upperPaths(b.Uppers))
	}
	return nil
}

// errForkView: a branch's view is not the parent's.
var errForkView = errors.New("gvisor: the branch's view differs from the parent's")

func upperPaths(ms []fsdelta.Mount) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Path
	}
	return out
}

// scratchPath names rel in the view guest's scratch tmpfs through the host's
// handle on it, for a program this process starts.
func (b *box) scratchPath(rel string) string {
	return "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + strconv.Itoa(int(b.Scratch.Fd())) + "/" + rel
}

// viaRoot names dir as a program in a view guest's mount namespace reaches
// it: through /proc/PID/root of this process.
func viaRoot(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return "/proc/" + strconv.Itoa(os.Getpid()) + "/root" + abs, nil
}

// run runs argv, its output in the error.
func run(ctx context.Context, argv []string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out tailWriter
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// errImageResume: only a session on the host's view forks with memory.
var errImageResume = errors.New("gvisor: a session on an image cannot be restored from a checkpoint")

// Resume starts a session sandbox for spec from what Snapshot saved in
// dir: a new view (the parent's upper dirs copied in), cgroup, masks and
// netsim, and runsc restore of the saved kernel into it, whose guest's
// control socket is the new runsc's stdin. Package session's fork with
// memory calls it for each branch.
func (r *Rung) Resume(ctx context.Context, spec dryexec.SandboxSpec, dir string) (dryexec.Sandbox[wire.SessionStart], error) {
	if spec.Image != nil {
		return nil, errImageResume
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return r.openSession(ctx, spec, abs)
}
