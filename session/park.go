package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung"
	"github.com/dryexec/dryexec/wire"
)

// ErrParkUnsupported: the session's rung cannot park it (only the vm
// rung's sandboxes save their machine's state).
var ErrParkUnsupported = errors.New("session: this rung cannot park a session")

// parker is a sandbox that can save itself to a directory and end,
// holding nothing on the host (rung/vm's).
type parker interface {
	Park(ctx context.Context, dir string) error
}

// resumer is a rung that can start a sandbox again from what its parker
// saved.
type resumer interface {
	Resume(ctx context.Context, spec dryexec.SandboxSpec, dir string) (dryexec.Sandbox[wire.SessionStart], error)
}

// Parked is a session saved by Park: its sandbox's state in Dir, and what
// the host kept of it (options, cache, host objects, emit callback).
// Resume starts it again, once.
type Parked struct {
	// Dir holds the sandbox's saved state.
	Dir string
	// At is when it was parked.
	At time.Time

	opt         Options
	cache       *Cache
	hostObjects map[string]*hostObject
	hostGlobals bool
	onEmit      func(wire.Emit)
	violations  []dryexec.Violation
	network     []dryexec.NetworkEvent
}

// Options are the options the parked session was opened with.
func (p *Parked) Options() Options { return p.opt }

// Park saves the session to dir (which must exist; the caller owns it) and
// ends its sandbox: a parked session holds no memory or process on the
// host. The session's workspace, baseline, shell state (cwd, exported
// variables) and cache are kept; the pre-started Python runner starts again
// on resume. A process a command left running holds the VM's view, so the
// guest refuses the park (and a fork) while one does. On the vm rung, what
// the session wrote outside its workspace (the view's upper dirs) and
// /dev/shm are not kept. s is closed on success; on failure it goes on as
// it was, unless the failure lost it (dryexec.ErrSessionLost).
func (s *Session) Park(ctx context.Context, dir string) (*Parked, error) {
	p, ok := s.sb.(parker)
	if !ok {
		return nil, fmt.Errorf("%w (rung %s)", ErrParkUnsupported, s.opt.Rung)
	}
	if _, err := s.call(ctx, wire.VerbSessionPark, nil); err != nil {
		return nil, err
	}
	if err := p.Park(ctx, dir); err != nil {
		// The VM runs on: its guest takes its root back.
		if _, uerr := s.call(context.WithoutCancel(ctx), wire.VerbSessionUnpark, &wire.SessionUnpark{WallNS: time.Now().UnixNano()}); uerr != nil {
			return nil, fmt.Errorf("session: park: %w; and the guest could not resume: %w", err, uerr)
		}
		return nil, fmt.Errorf("session: park: %w", err)
	}
	pk := &Parked{Dir: dir, At: time.Now(), opt: s.opt, cache: s.cache, violations: s.Violations(), network: s.Network()}
	s.bindMu.Lock()
	pk.hostObjects, pk.hostGlobals = s.hostObjects, s.hostGlobals
	s.bindMu.Unlock()
	s.emitMu.Lock()
	pk.onEmit = s.onEmit
	s.emitMu.Unlock()
	s.Close()
	return pk, nil
}

// Resume starts a parked session again where it was parked: the same
// workspace, baseline, shell state and cache, in a new sandbox restored
// from p.Dir. p is spent: a second Resume is refused (the saved state is
// one moment of one sandbox; resuming it twice would fork it without the
// fork's bookkeeping).
func Resume(ctx context.Context, p *Parked) (*Session, error) {
	if p == nil || p.opt.Rung == "" {
		return nil, errors.New("session: resume: not a parked session")
	}
	opt := p.opt
	p.opt = Options{}
	s, err := resume(ctx, opt, p.Dir, false, p.cache, p.violations, p.network)
	if err != nil {
		return nil, err
	}
	s.bind(p.hostObjects, p.onEmit)
	s.bindMu.Lock()
	s.hostGlobals = p.hostGlobals
	s.bindMu.Unlock()
	return s, nil
}

// resume starts a session of opt from the sandbox state saved in dir, with
// cache and what the host kept of it; branch: as a fork's branch
// (wire.SessionUnpark.Branch).
func resume(ctx context.Context, opt Options, dir string, branch bool, cache *Cache, violations []dryexec.Violation, network []dryexec.NetworkEvent) (*Session, error) {
	sr, err := sessionRung(ctx, opt)
	if err != nil {
		return nil, err
	}
	r, ok := sr.(resumer)
	if !ok {
		return nil, fmt.Errorf("%w (rung %s)", ErrParkUnsupported, opt.Rung)
	}
	sb, err := r.Resume(ctx, sandboxSpec(opt), dir)
	if err != nil {
		return nil, err
	}
	s := &Session{sb: sb, opt: opt, runErr: make(chan error, 1), cache: cache, violations: violations, netBefore: network}
	s.hostCtx, s.hostCancel = context.WithCancel(context.Background())
	s.peer = wire.NewPeer(wire.NewConn(sb.Conn()), s.serveGuest)
	go func() {
		err := s.peer.Run(context.Background())
		s.gone.Store(true)
		s.killExec()
		s.runErr <- err
	}()
	f, err := s.call(ctx, wire.VerbSessionUnpark, &wire.SessionUnpark{WallNS: time.Now().UnixNano(), Branch: branch})
	if err != nil {
		s.Close()
		return nil, err
	}
	if err := f.Decode(&s.info); err != nil {
		s.Close()
		return nil, err
	}
	// Restored, the sandbox gets what a new one gets once its guest runs
	// (gvisor: its processes before runsc's for the host OOM killer).
	if err := sb.Ready(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// ParkRungs returns the rungs of this build whose sessions can be parked
// and resumed.
func ParkRungs() []string {
	return rung.BuiltWhere(func(r dryexec.Rung) bool {
		_, ok := r.(resumer)
		return ok
	})
}

// snapshotter is a sandbox that can save its state and run on (rung/vm's):
// what a fork with memory restores each branch from.
type snapshotter interface {
	Snapshot(ctx context.Context, dir string) error
}

// forkMemory forks a session whose sandbox is a snapshotter: the guest lets
// go of its view, the sandbox saves its state and runs on, the guest takes
// its view back; then n sandboxes are restored from that state, each a
// branch whose guest is the parent's as it was (its baseline is the
// workspace at the fork, its origin the parent's baseline). s.fork.mu held.
func (s *Session) forkMemory(ctx context.Context, n int, sn snapshotter) ([]*Session, error) {
	// Not in /tmp: the memory image and the copied upper dirs are the
	// session's, and other sandboxes see the host's /tmp.
	dir, err := dryexec.PrivateTemp(os.Getenv, "fork-")
	if err != nil {
		return nil, fmt.Errorf("session: fork: %w", err)
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	if _, err := s.call(ctx, wire.VerbSessionPark, nil); err != nil {
		return nil, err
	}
	serr := sn.Snapshot(ctx, dir)
	if _, err := s.call(context.WithoutCancel(ctx), wire.VerbSessionUnpark, &wire.SessionUnpark{WallNS: time.Now().UnixNano()}); err != nil {
		return nil, fmt.Errorf("session: fork: the parent could not resume after its snapshot: %w", err)
	}
	s.fork.pause = time.Since(start)
	if serr != nil {
		return nil, fmt.Errorf("session: fork: %w", serr)
	}
	group := new([]*Session)
	hostObjects := s.bound()
	s.emitMu.Lock()
	onEmit := s.onEmit
	s.emitMu.Unlock()
	s.bindMu.Lock()
	globals := s.hostGlobals
	s.bindMu.Unlock()
	for range n {
		b, err := resume(ctx, s.opt, dir, true, s.cache.clone(), nil, nil)
		if err != nil {
			for _, b := range *group {
				b.Close()
			}
			return nil, err
		}
		b.bind(hostObjects, onEmit)
		b.bindMu.Lock()
		b.hostGlobals = globals
		b.bindMu.Unlock()
		b.fork.parent, b.fork.group = s, group
		*group = append(*group, b)
	}
	return slices.Clone(*group), nil
}

// ParkRecord is what a parked session is besides its sandbox's saved
// state: the options it was opened with (those a later process can use: no
// Go values), its cache, its violations and network log so far, and its
// host objects' allowlists. A daemon writes it beside the saved state, so
// that a later daemon, in another process, can resume the session
// (LoadParked). It is JSON.
type ParkRecord struct {
	Rung           string            `json:"rung"`
	Workspace      string            `json:"workspace,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	OutputCap      int               `json:"output_cap,omitempty"`
	Shell          string            `json:"shell,omitempty"`
	CacheReadOnly  bool              `json:"cache_read_only,omitempty"`
	PythonWarm     bool              `json:"python_warm,omitempty"`
	Limits         dryexec.Limits    `json:"limits"`
	Masks          []string          `json:"masks,omitempty"`
	NoDefaultMasks bool              `json:"no_default_masks,omitempty"`
	OwnPaths       []string          `json:"own_paths,omitempty"`
	Net            []string          `json:"net,omitempty"`
	NetCADir       string            `json:"net_ca_dir,omitempty"`
	// Image is the image the session runs on (nil: the host's root): the
	// resuming process resolves it again and must find the same digest.
	Image *ParkedImage `json:"image,omitempty"`
	// Allow lists the methods of each host object; the resuming process
	// serves the objects (LoadParked's hostObjects).
	Allow       map[string][]string    `json:"allow,omitempty"`
	HostGlobals bool                   `json:"host_globals,omitempty"`
	Cache       []ParkedCacheItem      `json:"cache,omitempty"`
	Violations  []dryexec.Violation    `json:"violations,omitempty"`
	Network     []dryexec.NetworkEvent `json:"network,omitempty"`
}

// ParkedImage names a parked session's image.
type ParkedImage struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
}

// ParkedCacheItem is one cache entry of a ParkRecord.
type ParkedCacheItem struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
	Kind  string `json:"kind,omitempty"`
}

// Record is p as a ParkRecord.
func (p *Parked) Record() ParkRecord {
	o := p.opt
	r := ParkRecord{Rung: o.Rung, Workspace: o.Workspace, Env: o.Env, OutputCap: o.OutputCap, Shell: o.Shell,
		CacheReadOnly: o.CacheReadOnly, PythonWarm: o.PythonWarm, Limits: o.Limits, Masks: o.Masks, NoDefaultMasks: o.NoDefaultMasks,
		OwnPaths: o.OwnPaths, Net: o.Net, NetCADir: o.NetCADir, HostGlobals: p.hostGlobals,
		Violations: p.violations, Network: p.network}
	if o.Image != nil {
		r.Image = &ParkedImage{Ref: o.Image.Ref, Digest: o.Image.Digest}
	}
	if len(p.hostObjects) > 0 {
		r.Allow = o.Allow
	}
	if p.cache != nil {
		p.cache.mu.Lock()
		for _, k := range slices.Sorted(maps.Keys(p.cache.m)) {
			e := p.cache.m[k]
			r.Cache = append(r.Cache, ParkedCacheItem{Key: k, Value: e.v, Kind: e.kind})
		}
		p.cache.mu.Unlock()
	}
	return r
}

// ErrBadParkRecord: a park record that cannot be resumed as it is (a field
// out of range, a cache entry of an unknown kind).
var ErrBadParkRecord = errors.New("session: a park record that cannot be resumed")

// Check reports what makes r unusable, before anything is started from it.
func (r *ParkRecord) Check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadParkRecord, fmt.Sprintf(format, a...))
	}
	if r.Rung == "" {
		return bad("no rung")
	}
	// A record's rung names what resumes its saved state: one that cannot
	// (a tampered record) would fail only once the resume has spent it.
	if !slices.Contains(ParkRungs(), r.Rung) {
		return bad("rung %q cannot resume a park", r.Rung)
	}
	if err := CheckShell(r.Shell); err != nil {
		return bad("%v", err)
	}
	if err := r.Limits.Check(); err != nil {
		return bad("limits: %v", err)
	}
	if r.OutputCap < 0 {
		return bad("output_cap %d", r.OutputCap)
	}
	if r.Image != nil && (r.Image.Ref == "" || r.Image.Digest == "") {
		return bad("an image without its reference or digest")
	}
	seen := map[string]bool{}
	for _, c := range r.Cache {
		if err := checkCacheKind(c.Kind); err != nil {
			return bad("cache %q: %v", c.Key, err)
		}
		if seen[c.Key] {
			return bad("cache key %q twice", c.Key)
		}
		seen[c.Key] = true
	}
	return nil
}

// ResumeBinding is what the resuming process gives a ParkRecord: its own
// guest, log, host objects (served by it: each named in the record's Allow)
// and emit callback, the image resolved again (when the record has one) and
// its own paths, hidden from the sandbox with the record's.
type ResumeBinding struct {
	GuestExe    string
	Log         *slog.Logger
	HostObjects map[string]any
	OnEmit      func(wire.Emit)
	Image       *dryexec.ImageRoot
	OwnPaths    []string
}

// LoadParked is the parked session that rec and the saved state in dir
// describe, parked at at: what Resume starts again, in this process. It
// checks rec first (ErrBadParkRecord).
func LoadParked(dir string, at time.Time, rec ParkRecord, b ResumeBinding) (*Parked, error) {
	if err := rec.Check(); err != nil {
		return nil, err
	}
	if (rec.Image == nil) != (b.Image == nil) || rec.Image != nil && rec.Image.Digest != b.Image.Digest {
		return nil, fmt.Errorf("%w: the session's image is not the one given", ErrBadParkRecord)
	}
	opt := Options{Rung: rec.Rung, Workspace: rec.Workspace, Env: rec.Env, OutputCap: rec.OutputCap, Shell: rec.Shell,
		GuestExe: b.GuestExe, Log: b.Log, CacheReadOnly: rec.CacheReadOnly, PythonWarm: rec.PythonWarm, Limits: rec.Limits,
		Masks: rec.Masks, NoDefaultMasks: rec.NoDefaultMasks, Net: rec.Net, NetCADir: rec.NetCADir, Image: b.Image,
		HostObjects: b.HostObjects, Allow: rec.Allow, NoHostGlobals: !rec.HostGlobals,
		OwnPaths: slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(rec.OwnPaths), b.OwnPaths...))))}
	objs, err := newHostObjects(b.HostObjects, rec.Allow)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadParkRecord, err)
	}
	cache := newCache(rec.CacheReadOnly)
	for _, c := range rec.Cache {
		if err := cache.SetEntry(c.Key, CacheItem{Value: c.Value, Kind: c.Kind}); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadParkRecord, err)
		}
	}
	return &Parked{Dir: dir, At: at, opt: opt, cache: cache, hostObjects: objs, hostGlobals: rec.HostGlobals,
		onEmit: b.OnEmit, violations: rec.Violations, network: rec.Network}, nil
}
