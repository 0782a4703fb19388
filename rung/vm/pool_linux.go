package vm

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/procfs"
	"github.com/dryexec/dryexec/internal/warm"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/wire"
)

// sandbox is what a VM is built from besides the command: the view (the
// host's mount plan, the resolved masks and dryexec's own hidden paths, the
// write budget), the VM's RAM (the limits), and its network (the --net
// specs, netsim's CA). A pooled VM serves only a trial asking for the same.
type sandbox struct {
	mounts    []wire.MountSpec
	cover     linuxns.Cover
	caDir     string
	net       []string // never empty ("none")
	limits    dryexec.Limits
	upperSize int64
	// image: the layer dirs of a trial on an image (nil: the host's view).
	image []string
}

// sandboxFor resolves spec's sandbox against the host as it is now.
func sandboxFor(spec dryexec.TrialSpec) (sandbox, error) {
	if spec.Image != nil {
		return imageSandbox(spec)
	}
	mounts, err := linuxns.Mounts()
	if err != nil {
		return sandbox{}, err
	}
	// netsim's CA key is masked in every sandbox, as on ns: it signs what
	// sandboxes trust. Made first: only a path that exists is masked.
	caDir, err := linuxns.EnsureCA(spec.NetCADir)
	if err != nil {
		return sandbox{}, err
	}
	cover, err := linuxns.ResolveCover(append(slices.Clone(spec.Masks), caDir), spec.NoDefaultMasks, spec.OwnPaths)
	if err != nil {
		return sandbox{}, err
	}
	nets := spec.Net
	if len(nets) == 0 {
		nets = []string{"none"}
	}
	return sandbox{mounts: mounts, cover: cover, caDir: caDir, net: nets, limits: spec.Limits, upperSize: spec.UpperSizeBytes}, nil
}

func (a sandbox) equal(b sandbox) bool {
	return a.limits == b.limits && a.upperSize == b.upperSize && a.caDir == b.caDir && slices.Equal(a.net, b.net) &&
		slices.Equal(a.cover.Masks, b.cover.Masks) && slices.Equal(a.cover.Hidden, b.cover.Hidden) && slices.Equal(a.mounts, b.mounts) && slices.Equal(a.image, b.image)
}

// Pool keeps VMs booted ahead of trials: the view guest has built the view
// and become QEMU, the VM has booted, its trial guest has greeted and waits
// for its trial.start, and the VM's netsim serves its NIC. A trial that
// takes one pays only for the command, the VM's end and the walk; under TCG
// that skips seconds of boot. A VM serves one trial and ends with it (as a
// cold one does: its init resets the machine); the pool refills in the
// background, one VM at a time, after the trial's delta is returned
// (package warm, as linuxns.Pool). What a pooled VM was booted with: the
// sandbox (above), fixed by the pool's template; the command, its env,
// cwd, stdin, timeout and output cap are the trial's own, sent at hand-out,
// as is the host's wall clock the VM sets. A trial asking for another
// sandbox runs cold, exactly as Rung.Trial.
type Pool struct {
	r    *Rung
	opts dryexec.PoolOptions
	w    *warm.Pool[*trial]
}

var (
	_ dryexec.Pool   = (*Pool)(nil)
	_ dryexec.Pooler = (*Rung)(nil)
)

// NewPool implements dryexec.Pooler (see the function NewPool).
func (r *Rung) NewPool(ctx context.Context, opts dryexec.PoolOptions) (dryexec.Pool, error) {
	return NewPool(ctx, r, opts)
}

// NewPool starts a pool of VMs for trials shaped like opts.Spec; the first
// boot in the background. The pool lives until Close.
func NewPool(ctx context.Context, r *Rung, opts dryexec.PoolOptions) (*Pool, error) {
	if os.Geteuid() != 0 {
		return nil, unavailable("root: the vm rung's view guest builds overlays as root (rootless is not supported yet)")
	}
	opts.Spec = opts.Spec.WithDefaults()
	// The template is checked once: a bad one would fail every refill.
	if _, err := sandboxFor(opts.Spec); err != nil {
		return nil, err
	}
	if err := opts.Spec.Limits.Check(); err != nil {
		return nil, err
	}
	p := &Pool{r: r, opts: opts}
	p.w = warm.New(ctx, warm.Options{Size: opts.Size, IdleTimeout: opts.IdleTimeout, Log: r.Log, Background: opts.Background}, warm.Funcs[*trial]{
		Prepare: p.boot,
		Destroy: (*trial).destroy,
		// Each boot resolves the template's sandbox again: host mounts
		// come and go, and masked paths appear; older VMs are then stale.
		Same:  func(a, b *trial) bool { return a.sb.equal(b.sb) },
		Alive: (*trial).alive,
	})
	return p, nil
}

// boot boots one VM for the template, up to its trial guest's hello and
// netsim's readiness. Cancelling ctx (Close) kills a VM still booting.
func (p *Pool) boot(ctx context.Context) (*trial, error) {
	spec := p.opts.Spec
	// netsim's mocks are seeded by the id of the VM's own netsim, as in an
	// ns pool; the delta carries the trial's.
	spec.TrialID = dryexec.NewTrialID()
	t, err := p.r.newTrial(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := t.start(); err != nil {
		t.destroy()
		return nil, err
	}
	if err := t.bootVM(ctx); err != nil {
		t.destroy()
		return nil, err
	}
	// A mock file that does not compile fails here, and the trial that
	// then runs cold reports it as its own ErrBadAction.
	if err := t.net.ready(ctx); err != nil {
		t.destroy()
		return nil, err
	}
	t.pooled = true
	return t, nil
}

// destroy ends a VM and its netsim and frees what the host holds of them.
func (t *trial) destroy() {
	t.cleanup()
	t.net.close()
}

// alive says whether a pooled VM can still serve: QEMU runs and so does its
// netsim. A VM whose QEMU was killed would fail its trial, not run it.
func (t *trial) alive() bool {
	select {
	case <-t.Waited:
		return false
	default:
	}
	return t.net.net.Ended() == ""
}

// bootNote is the delta's warning on the VM's boot: which accelerator ran
// (TCG and KVM differ by an order of magnitude in speed, not in what the
// command may do) and what the boot cost, ahead of the trial or in it.
func (t *trial) bootNote() string {
	if t.pooled {
		return fmt.Sprintf("vm: QEMU microvm, accel=%s, booted ahead in the warm pool (to the guest's hello in %v)", t.m.accel, t.boot.Round(time.Millisecond))
	}
	return fmt.Sprintf("vm: QEMU microvm, accel=%s, booted to the guest's hello in %v", t.m.accel, t.boot.Round(time.Millisecond))
}

// Name implements dryexec.Rung: a pool is the vm rung, warm.
func (p *Pool) Name() string { return Name }

// Available implements dryexec.Rung.
func (p *Pool) Available(ctx context.Context) error { return p.r.Available(ctx) }

// Trial runs spec in a VM booted ahead when one fits (the same sandbox) and
// still runs, else cold; either way the delta is the one Rung.Trial would
// give, but for the boot's warning.
func (p *Pool) Trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	spec = spec.WithDefaults()
	// No pooled VM is booted over an image (sb.equal): it runs cold.
	if err := checkAction(spec); err != nil {
		return nil, err
	}
	if spec.TrialID == "" {
		spec.TrialID = dryexec.NewTrialID()
	}
	sb, err := sandboxFor(spec)
	if err != nil {
		return nil, err
	}
	t, ok, err := p.w.Take(func(t *trial) bool { return t.sb.equal(sb) })
	if err != nil {
		return nil, err
	}
	if !ok {
		// The template's own sandbox, and no ready VM fits: they were
		// booted before the host changed (a mask, a mount) and would never
		// fit again, while a full pool boots no new one by itself. They
		// are replaced now (linuxns.Pool does the same).
		if tsb, err := sandboxFor(p.opts.Spec); err == nil && tsb.equal(sb) {
			p.w.Stale(func(t *trial) bool { return !t.sb.equal(sb) })
		}
		defer p.w.Done()
		return p.r.Trial(ctx, spec)
	}
	// The trial's own spec from here on: its command, output cap, stdio,
	// store and id. What the VM was built from is the same (sb).
	t.Spec = spec
	d, err := t.run(ctx)
	if err != nil && !t.Sent && !t.alive() && ctx.Err() == nil {
		// The VM died between the check and the hand-out, before the
		// command reached it: the trial runs cold, as if it had not been
		// handed out.
		t.destroy()
		defer p.w.Done()
		return p.r.Trial(ctx, spec)
	}
	// QEMU has ended and the upper dirs are walked: what is left is
	// closing, after the caller has the delta; the refill starts after
	// it, so that neither competes with the trial for the CPUs. Close
	// waits for it.
	go func() {
		defer p.w.Done()
		t.destroy()
	}()
	return d, err
}

// Stats reports the pool's figures; IdlePSSBytes is the ready VMs' QEMU
// (which the view guest became) and netsim processes together.
func (p *Pool) Stats() dryexec.PoolStats {
	w := p.w.Stats()
	s := dryexec.PoolStats{Size: w.Size, Ready: w.Ready, Settled: w.Ready, Busy: w.Busy, Hits: w.Hits, Misses: w.Misses, Failed: w.Failed, LastError: w.LastError}
	for _, pid := range p.readyPids() {
		_, pss := procfs.Rollup(pid)
		s.IdlePSSBytes += pss
	}
	return s
}

// readyPids are the host processes of the ready VMs: each one's QEMU and
// netsim.
func (p *Pool) readyPids() []int {
	var pids []int
	p.w.Each(func(t *trial) {
		pids = append(pids, t.Cmd.Process.Pid)
		if n := t.net.net.Pid(); n > 0 {
			pids = append(pids, n)
		}
	})
	return pids
}

// Close ends the ready VMs (and one booting), stops refilling and waits
// until every used VM is torn down; trials running now finish. Later trials
// get warm.ErrClosed.
func (p *Pool) Close() error {
	p.w.Close()
	return nil
}

// SandboxKey says what of the host a session VM opened now for spec would
// be built from (the mount plan, the resolved masks: ns's key); a session
// pool's VM built from another is stale.
func (r *Rung) SandboxKey(spec dryexec.SandboxSpec) (string, error) {
	return (&linuxns.Rung{}).SandboxKey(spec)
}
