// Package session owns sessions: one sandbox kept alive over a workspace, with
// many shell and Python execs and a diff at any time (tree in → execute → diff
// out). It has a rung from the registry (package rung) prepare a sandbox for
// it (dryexec.SessionRung: on host a plain subprocess with a scan-staged
// workspace in a temp dir, on ns Linux namespaces with an overlay-staged
// workspace) and speaks package wire to the guest supervisor running there.
// It imports no rung's package.
//
// # Python
//
// Session.Python runs code in a fresh interpreter in the sandbox (the guest's
// runner, /usr/bin/python3 preferred), in the shell's cwd and environment, over
// the same files. Inputs are globals; a trailing expression's value is echoed
// to the transcript (not for statements or None); print calls become entries
// (type names, full length in UTF-8 bytes, text capped at 64 KiB, 1000 entries
// and 1 MiB in all, the rest counted in prints_dropped) while the transcript
// (stdout and stderr merged, its tail bounded by Options.OutputCap) stays
// exact. Top-level bindings come back as outputs through the tagged codec
// (wire.Value: json, bytes, or file — a pathlib.Path, relative to the workspace
// when inside it); other values are listed in outputs_skipped by type name;
// names starting with "_", modules, functions, classes and the injected
// helpers are not outputs. Nothing the codec carries is pickled; the cache's
// pickles (below) are opaque bytes outside the sandbox.
//
// The code sees three helpers as globals:
//
//   - cache: the session's Cache, dict-like (cache[k], cache.get(k), k in
//     cache, cache.keys(), cache[k] = v, del cache[k]); str keys; bytes and
//     str values stored raw, any other value pickled and unpickled in the
//     sandbox only (CachePickle). An exec's writes and deletes are visible to its own reads and
//     reach the host only if it succeeds. Options.CacheReadOnly refuses writes
//     (PermissionError in Python).
//   - emit(name, value): an event for the host, delivered in order to
//     Session.Emits and Options.OnEmit, kept even if the exec fails. A value
//     the codec cannot carry is a TypeError in Python; nothing is sent.
//   - host: proxies for host objects, host.db or host.get("db"); each is
//     also a global of its own name (db) unless Options.NoHostGlobals.
//
// # Host objects
//
// Options.HostObjects registers Go values by name; Python calls their methods
// through a proxy (host.db.query(1, "x")), and each call is decided on the
// host, never in the sandbox:
//
//   - Every registered object needs an entry in Options.Allow listing the
//     methods that may be called; a missing entry, an entry for an object that
//     is not registered, a "*" anywhere, or a listed method that does not exist
//     or whose signature the codec cannot carry makes Open fail. An empty list
//     is allowed (nothing callable).
//   - A name is matched with its first letter upper-cased: "query" in Allow and
//     db.query in Python both mean the Go method Query.
//   - A call to a method not listed, to a name starting with "_" (even if
//     listed), or to an object that is not registered is refused with a
//     *wire.RemoteError of code "permission", which Python raises as
//     PermissionError.
//   - Methods are called by reflection: an optional first context.Context
//     parameter (cancelled when the session closes), then positional
//     parameters, each JSON-representable or []byte (a bytes value; a file
//     value passes its path to a string), optionally variadic; results (), (T),
//     (error) or (T, error), T JSON-representable or []byte. A returned error
//     or a panic is raised in Python as RuntimeError, a wrong argument as
//     TypeError. Keyword arguments are refused.
//   - Methods and OnEmit run while the exec waits for them: they may use the
//     Cache and Emits, but must not call the Session's guest methods (Shell,
//     Python, Diff, …), which wait for the exec to end.
package session

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup"
	"github.com/dryexec/dryexec/rung"
	"github.com/dryexec/dryexec/wire"
)

// Options configures a session.
type Options struct {
	// Rung is any rung that holds sessions (a dryexec.SessionRung): "ns"
	// (the default) or "host"; CheckRung says whether one can here.
	Rung string
	// Workspace is where the workspace appears inside the sandbox (ns; default
	// /workspace). The host rung roots it in a temp dir and Ping says where.
	Workspace string
	// Env is the initial environment of every exec; nil means PATH, LANG and
	// HOME set to the workspace.
	Env map[string]string
	// OutputCap bounds each exec's transcript and streams (0: 1 MiB).
	OutputCap int
	// Shell is what shell execs run in: "" means bash where the sandbox has
	// /bin/bash (ANSI-C quoting, arrays, [[ ]] work as agents expect), else
	// /bin/sh; "bash" (refused where there is none), "sh", or an absolute
	// path inside the sandbox.
	Shell string
	// GuestExe is the binary started as `guest session` (default /proc/self/exe,
	// which must call guest.MaybeMain first in main).
	GuestExe string
	// Log receives debug records; nil logs nothing.
	Log *slog.Logger

	// CacheReadOnly refuses the sandbox's cache writes and deletes (Go callers
	// may still change the cache).
	CacheReadOnly bool
	// OnEmit, if not nil, is called with each event as it arrives, in order,
	// while the exec that emitted it waits (see the package comment).
	OnEmit func(wire.Emit)
	// HostObjects are Go values the sandbox's Python may call by name, within
	// Allow (see the package comment).
	HostObjects map[string]any
	// Allow maps each host object to the methods that may be called.
	Allow map[string][]string
	// NoHostGlobals binds host objects only as host.NAME, not also as a
	// global NAME of their own.
	NoHostGlobals bool
	// Cache is the cache's initial content (see CacheItem).
	Cache map[string]CacheItem
	// PythonWarm starts a Python runner when the session opens, so that
	// even the first exec_python is warm; without it the first one starts
	// its own and a session that never runs Python keeps no interpreter.
	PythonWarm bool

	// Limits bounds the session's processes as a whole, over its whole life
	// (ns rung: a cgroup; zero fields take the defaults, docs/limits.md).
	Limits dryexec.Limits
	// Masks are extra host paths the sandbox sees empty (ns rung); the
	// default credential paths are masked too unless NoDefaultMasks.
	Masks          []string
	NoDefaultMasks bool
	// OwnPaths are where the caller keeps dryexec's own state, hidden whole
	// from the sandbox with the default places, as TrialSpec.OwnPaths (ns
	// rung; NoDefaultMasks does not turn it off).
	OwnPaths []string
	// Cgroups says where the session's cgroup is made (zero: package cgroup's
	// default).
	Cgroups cgroup.Options

	// Net is the session's network (ns rung), as TrialSpec.Net and --net:
	// "none" (the default: nothing leaves, every attempt is logged),
	// "mock:FILE", "allow:RULES", or mocks and allow rules together. The
	// session's netsim lives as long as the session. The host rung has no
	// network of its own and refuses any Net.
	Net []string
	// NetCADir holds netsim's per-install CA ("" means
	// $DRYEXEC_HOME/netsim-ca); mask it from the sandbox (Masks).
	NetCADir string
	// Image, when set, is the sandbox's root filesystem instead of the
	// host's (docs/images.md): the workspace is mounted over it, and the
	// image's Env is the base of the environment (Env's names win). The
	// caller keeps its layers in use (image.Cache.Use) until Close.
	Image *dryexec.ImageRoot
}

// Session is one live sandbox. Its methods may be called from several
// goroutines; the guest runs requests one at a time.
type Session struct {
	sb   dryexec.Sandbox[wire.SessionStart]
	opt  Options // what it was opened with (a fork's branches are too)
	peer *wire.Peer
	info wire.Ping
	fork forkState

	closeOnce sync.Once
	runErr    chan error // the peer's Run result
	// gone is set once the guest's stream has ended, closing that Close
	// has begun: a call failing then says which (call).
	gone, closing atomic.Bool

	cache *Cache
	// bindMu guards hostObjects, which a pooled session gets when it is
	// handed out (onEmit is guarded by emitMu).
	bindMu      sync.Mutex
	hostObjects map[string]*hostObject
	hostGlobals bool // bind host objects as globals too (not Options.NoHostGlobals)
	// hostCtx is handed to host-object methods; cancelled by Close.
	hostCtx    context.Context
	hostCancel context.CancelFunc

	pyMu sync.Mutex // one Python exec at a time from this host; guards pyAbandoned
	// pyAbandoned: a Python call returned before the guest answered it.
	pyAbandoned bool

	execMu  sync.Mutex // guards execSID
	execSID int        // session id of the exec in progress (0: none known)

	vioMu sync.Mutex // guards violations
	// violations accumulates what the sandbox reported, in order.
	violations []dryexec.Violation

	// netBefore is what the network logged before the session was parked
	// (its sandbox's netsim is new since).
	netBefore []dryexec.NetworkEvent

	emitMu    sync.Mutex // guards the fields below; held across OnEmit
	emits     []wire.Emit
	emitBytes int
	onEmit    func(wire.Emit)
}

// Open starts a session.
func Open(ctx context.Context, opt Options) (*Session, error) {
	opt = opt.withDefaults()
	if err := CheckShell(opt.Shell); err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	hostObjects, err := newHostObjects(opt.HostObjects, opt.Allow)
	if err != nil {
		return nil, err
	}
	s, err := open(ctx, opt)
	if err != nil {
		return nil, err
	}
	s.bind(hostObjects, opt.OnEmit)
	if err := s.configure(opt); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// CheckShell says whether shell is a value Options.Shell takes: "", "bash",
// "sh" or an absolute path. Whether that shell exists is known only inside
// the sandbox, where opening the session fails if it does not.
func CheckShell(shell string) error {
	switch {
	case shell == "" || shell == "bash" || shell == "sh":
		return nil
	case strings.HasPrefix(shell, "/") && !strings.ContainsRune(shell, 0):
		return nil
	}
	return fmt.Errorf("shell %q: want bash, sh or an absolute path in the sandbox", shell)
}

func (o Options) withDefaults() Options {
	if o.Rung == "" {
		o.Rung = "ns"
	}
	if o.OutputCap <= 0 {
		o.OutputCap = dryexec.DefaultOutputCap
	}
	return o
}

// bind gives s the caller's host objects and emit callback. Nothing of the
// sandbox's has run yet, so nothing has looked for them.
func (s *Session) bind(hostObjects map[string]*hostObject, onEmit func(wire.Emit)) {
	s.bindMu.Lock()
	s.hostObjects = hostObjects
	s.bindMu.Unlock()
	s.emitMu.Lock()
	s.onEmit = onEmit
	s.emitMu.Unlock()
}

func (s *Session) hostObject(name string) *hostObject {
	s.bindMu.Lock()
	defer s.bindMu.Unlock()
	return s.hostObjects[name]
}

// open starts a session for opt, without its host objects and emit callback
// (see bind).
func open(ctx context.Context, opt Options) (*Session, error) {
	sr, err := sessionRung(ctx, opt)
	if err != nil {
		return nil, err
	}
	if err := dryexec.CheckImage(sr, opt.Image); err != nil {
		return nil, err
	}
	sb, err := sr.OpenSandbox(ctx, sandboxSpec(opt))
	if err != nil {
		return nil, err
	}
	return startSession(ctx, opt, sb)
}

// startSession starts the session of sandbox sb, opened for opt: hello,
// session.start, Ready. On failure sb is closed.
func startSession(ctx context.Context, opt Options, sb dryexec.Sandbox[wire.SessionStart]) (*Session, error) {
	s := &Session{sb: sb, opt: opt, runErr: make(chan error, 1), cache: newCache(opt.CacheReadOnly)}
	s.hostCtx, s.hostCancel = context.WithCancel(context.Background())
	start := wire.SessionStart{Workspace: opt.Workspace, OutputCap: opt.OutputCap, Shell: opt.Shell, PythonWarm: opt.PythonWarm}
	env := opt.Env
	if env == nil {
		env = map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin", "LANG": "C.UTF-8", "HOME": sb.Workspace()}
	}
	env = imageEnv(opt, env)
	for k, v := range env {
		start.Env = append(start.Env, k+"="+v)
	}
	// After the caller's environment: the sandbox's trust variables win.
	sb.Configure(&start)
	conn := wire.NewConn(sb.Conn())
	hello, err := conn.Read()
	if err != nil || hello.Kind != wire.KindHello {
		s.Close()
		return nil, fmt.Errorf("%w: no hello from the session guest: %v", dryexec.ErrGuest, err)
	}
	s.peer = wire.NewPeer(conn, s.serveGuest)
	go func() {
		err := s.peer.Run(context.Background())
		s.gone.Store(true)
		// The guest is gone (closed or killed): on the host rung, nothing
		// else would stop what its last exec started.
		s.killExec()
		s.runErr <- err
	}()
	f, err := s.call(ctx, wire.VerbSessionStart, &start, wire.Attachments(start.TrustBundle)...)
	if err != nil {
		s.Close()
		return nil, err
	}
	if err := f.Decode(&s.info); err != nil {
		s.Close()
		return nil, err
	}
	// The view is built and nothing of the sandbox's has run yet.
	if err := sb.Ready(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// sessionRung is the rung opt names, if it can hold a session.
func sessionRung(ctx context.Context, opt Options) (dryexec.SessionRung[wire.SessionStart], error) {
	r, err := rung.Open(ctx, opt.Rung, rung.Config{GuestExe: opt.GuestExe, Log: opt.Log, Cgroups: opt.Cgroups})
	if err != nil {
		return nil, err
	}
	sr, ok := r.(dryexec.SessionRung[wire.SessionStart])
	if !ok {
		return nil, &dryexec.IsolationUnavailableError{Rung: r.Name(), Missing: "sessions are not supported on " + r.Name() + " yet"}
	}
	return sr, nil
}

// Rungs returns the rungs of this build that can hold a session, weakest
// first (whether this host can run them is CheckRung's question): what an
// interface lists to a client as a session's rungs.
func Rungs() []string {
	return rung.BuiltWhere(func(r dryexec.Rung) bool {
		_, ok := r.(dryexec.SessionRung[wire.SessionStart])
		return ok
	})
}

// CheckRung says whether rung name can hold a session on this host: nil, or
// why not (an *dryexec.IsolationUnavailableError when the rung is
// unavailable here or has no sessions yet).
func CheckRung(ctx context.Context, name string) error {
	_, err := sessionRung(ctx, Options{Rung: name})
	return err
}

// sandboxSpec is what opt asks of a session's sandbox.
func sandboxSpec(opt Options) dryexec.SandboxSpec {
	return dryexec.SandboxSpec{
		ID: "se_" + strings.TrimPrefix(dryexec.NewTrialID(), "tr_"), Workspace: opt.Workspace,
		Limits: opt.Limits, Masks: opt.Masks, NoDefaultMasks: opt.NoDefaultMasks, OwnPaths: opt.OwnPaths,
		Net: opt.Net, NetCADir: opt.NetCADir, Image: opt.Image,
	}
}

// imageEnv is env on an image: the image's Env under the caller's, or, when
// the caller gave none, under the session's defaults (def) but for the
// image's own PATH and LANG, which know where the image keeps its programs.
func imageEnv(opt Options, def map[string]string) map[string]string {
	if opt.Image == nil {
		return def
	}
	if opt.Env != nil {
		return dryexec.ImageAction(dryexec.Action{Env: opt.Env}, opt.Image).Env
	}
	env := dryexec.ImageAction(dryexec.Action{}, opt.Image).Env
	for k, v := range def {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}
	return env
}

// Network returns every network event of the session so far, in the order
// they completed: the first 10 000 are kept (netsim.Config.MaxEvents). Without
// netsim (the host rung, or a rootless host without /dev/net/tun, see
// Warnings) it is empty.
func (s *Session) Network() []dryexec.NetworkEvent {
	if len(s.netBefore) == 0 {
		return s.sb.Network()
	}
	return append(slices.Clone(s.netBefore), s.sb.Network()...)
}

// netMark is where the network log stands; netSince returns what came after.
func (s *Session) netMark() int { return len(s.Network()) }

// netSince returns the events logged after mark: an exec's own. A request
// netsim answered is logged before its last response bytes leave netsim, and
// a refusal (a DNS answer, an RST) before it is sent, so once the sandbox's
// log has caught up with netsim's (networkSyncer) each is in the list of the
// exec that made it (Network has it too).
func (s *Session) netSince(ctx context.Context, mark int) []dryexec.NetworkEvent {
	if n, ok := s.sb.(networkSyncer); ok {
		// Bounded and not cut by the exec's own end (a timed-out call
		// still reports what it tried): netsim is a local process, and
		// one that stopped answering must not hold the exec's result.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), netSyncWait)
		if err := n.SyncNetwork(sctx); err != nil {
			slog.Warn("session: the exec's network log may lack its last events", "err", err)
		}
		cancel()
	}
	log := s.Network()
	if mark >= len(log) {
		return nil
	}
	return log[mark:]
}

// networkSyncer is a sandbox whose network log lags netsim's (netsim runs as
// a process of its own and sends each event over a socket): SyncNetwork
// returns once Network holds every event netsim had logged when it was
// called.
type networkSyncer interface {
	SyncNetwork(ctx context.Context) error
}

// netSyncWait bounds a network sync (netSince).
const netSyncWait = 5 * time.Second

// networkEnder is a sandbox whose network can end before it does: netsim
// runs as a process of its own, which can be killed or crash.
type networkEnder interface {
	// NetworkEnded says why the network ended early, or "".
	NetworkEnded() string
}

// networkEnded says why the session's network ended early, or "" while it
// serves or where the sandbox has none. Every exec after that reports it:
// the requests it makes reach nothing, and its network log is no longer
// the whole of what it tried.
func (s *Session) networkEnded() string {
	if n, ok := s.sb.(networkEnder); ok {
		return n.NetworkEnded()
	}
	return ""
}

// oomCounter is a sandbox whose own kernel enforces its memory limit, out of
// the host cgroup's sight (vm: the VM's RAM): its guest counts the OOM kills
// of each exec, and the sandbox reports them with its Violations, as ns
// reports its cgroup's.
type oomCounter interface {
	// GuestOOMKills takes n (> 0) kills the guest counted during an exec.
	GuestOOMKills(n int64)
}

// takeOOMKills hands the OOM kills the guest counted during an exec (*n) to
// the sandbox and clears *n: the result has none, the session's Violations
// have them, the same shape on every rung.
func (s *Session) takeOOMKills(n *int64) {
	if o, ok := s.sb.(oomCounter); ok && *n > 0 {
		o.GuestOOMKills(*n)
	}
	*n = 0
}

// Violations returns everything the boundary saw so far in this session:
// limits hit ({kind: limit}: OOM kills, refused forks) and masked secrets read
// ({kind: secret}), in the order they were first seen. The host rung has no
// boundary and returns none.
func (s *Session) Violations() []dryexec.Violation {
	s.vioMu.Lock()
	defer s.vioMu.Unlock()
	s.violations = append(s.violations, s.sb.Violations()...)
	return append([]dryexec.Violation(nil), s.violations...)
}

// Warnings say which of the session's limits are not enforced as asked (e.g.
// no cgroup could be made rootless), and why its network ended early if
// netsim died.
func (s *Session) Warnings() []string { return s.sb.Warnings() }

// serveGuest answers the guest's calls (cache, host objects, events). They
// arrive while a Python exec is outstanding (each in its own goroutine, see
// wire.Peer), so nothing here waits for the guest; a call outside an exec is
// refused.
func (s *Session) serveGuest(ctx context.Context, f *wire.Frame) (any, [][]byte, error) {
	switch f.Verb {
	case wire.VerbVMAlive:
		// A vm guest's heartbeat: its sandbox's own watch counts it (it
		// reads the stream); nothing to answer, and it is no error.
		return nil, nil, nil
	case wire.VerbExecStarted:
		var es wire.ExecStarted
		if err := f.Decode(&es); err != nil || es.PID <= 1 {
			return nil, nil, remoteErr("protocol", "bad exec.started")
		}
		s.execMu.Lock()
		s.execSID = es.PID
		s.execMu.Unlock()
		return nil, nil, nil
	case wire.VerbCacheGet, wire.VerbCacheKeys, wire.VerbCacheSet, wire.VerbCacheDel:
		return s.cache.serve(ctx, f)
	case wire.VerbForkData:
		return s.fork.in.add(f.Bin)
	case wire.VerbHostCall, wire.VerbEmit:
		if !s.cache.running() {
			return nil, nil, remoteErr("no_exec", "%s outside an exec", f.Verb)
		}
		if f.Verb == wire.VerbEmit {
			return s.serveEmit(f)
		}
		return s.serveHostCall(f)
	}
	return nil, nil, remoteErr("unsupported", "%s is not available in this session", f.Verb)
}

// call makes one request; a broken stream is ErrSessionLost, which says
// whether the guest was already gone, or went while this call was in
// flight (its effects are then unknown), and how it ended.
func (s *Session) call(ctx context.Context, verb string, body any, bin ...[]byte) (*wire.Frame, error) {
	wasGone := s.gone.Load()
	f, err := s.peer.Call(ctx, verb, body, bin...)
	if errors.Is(err, wire.ErrClosed) {
		switch {
		case s.closing.Load():
			return nil, fmt.Errorf("%w: %s: the session was closed: %v", dryexec.ErrSessionLost, verb, err)
		case wasGone:
			return nil, fmt.Errorf("%w: %s: the session's guest supervisor is gone (%s); open a new session",
				dryexec.ErrSessionLost, verb, s.guestEnded())
		}
		return nil, fmt.Errorf("%w: the session's guest supervisor %s while %s was in flight: what this call did in the sandbox is unknown, and the session is gone (open a new one)",
			dryexec.ErrSessionLost, s.guestEnded(), verb)
	}
	return f, err
}

// guestEnded says how the session's guest process ended, as far as can be
// seen.
func (s *Session) guestEnded() string {
	if how, ok := s.sb.GuestEnded(); ok {
		return how
	}
	return "ended"
}

// Info is what the guest said at start: rung, staging, workspace, python.
func (s *Session) Info() wire.Ping { return s.info }

// Ping asks the guest how it is.
func (s *Session) Ping(ctx context.Context) (*wire.Ping, error) {
	f, err := s.call(ctx, wire.VerbPing, nil)
	if err != nil {
		return nil, err
	}
	var p wire.Ping
	return &p, f.Decode(&p)
}

// Shell runs command in the session's shell: cwd and exported variables carry
// over from one call to the next. timeout 0 means none.
func (s *Session) Shell(ctx context.Context, command string, timeout time.Duration) (*wire.ShellResult, error) {
	return s.ShellWith(ctx, command, ShellOptions{Timeout: timeout})
}

// Diff is the workspace's changes since the baseline.
type Diff struct {
	// Writes maps each new or changed file to its content.
	Writes map[string][]byte
	// Links maps each new or changed symlink to its target.
	Links map[string]string
	// Deletes lists removed files (every file of a removed directory).
	Deletes []string
	// Modes maps paths whose permissions alone changed (and every written file)
	// to their mode: exec bits kept, setuid/setgid stripped.
	Modes map[string]fs.FileMode
}

// Empty reports whether nothing changed: no write, link, delete, or mode
// change (a chmod alone is a change).
func (d *Diff) Empty() bool { return len(d.Paths()) == 0 }

// Paths lists every changed path once, sorted: written, linked, deleted or
// with a new mode.
func (d *Diff) Paths() []string {
	var ps []string
	for p := range d.Writes {
		ps = append(ps, p)
	}
	for p := range d.Links {
		ps = append(ps, p)
	}
	for p := range d.Modes {
		ps = append(ps, p)
	}
	ps = append(ps, d.Deletes...)
	slices.Sort(ps)
	return slices.Compact(ps)
}

// Diff returns the changes since the baseline; rebase makes the current state
// the new baseline.
func (s *Session) Diff(ctx context.Context, rebase bool) (*Diff, error) {
	return s.pullDiff(ctx, wire.VerbPullDiff, &wire.PullDiff{Rebase: rebase})
}

// ErrWorkspaceMoved is the workspace holding other changes than the diff a
// caller committed when it asks to make that diff the baseline: a process the
// session left running (a daemon of an earlier exec) changed it meanwhile.
var ErrWorkspaceMoved = errors.New("the session's workspace changed after the committed diff")

// DriftError lists what differs between the committed diff and the
// workspace; Folded says whether those changes are in the baseline now (the
// workspace moved between the guest's check and its fold) or not (nothing
// was rebased: the next diff still shows them).
type DriftError struct {
	Paths  []string
	Folded bool
}

func (e *DriftError) Error() string {
	what := "nothing was rebased: the next diff shows them"
	if e.Folded {
		what = "they are in the session's baseline now but not on the host, and later diffs will not show them"
	}
	const max = 20
	ps := e.Paths
	more := ""
	if len(ps) > max {
		ps, more = ps[:max], fmt.Sprintf(" and %d more", len(ps)-max)
	}
	return fmt.Sprintf("%v: %s%s; %s", ErrWorkspaceMoved, strings.Join(ps, ", "), more, what)
}

func (e *DriftError) Unwrap() error { return ErrWorkspaceMoved }

// Rebase makes the workspace the new baseline once committed (a diff the
// caller has applied to the host) is exactly what it holds. A plain
// Diff(ctx, true) folds whatever the workspace holds when it runs: a
// daemon left by an earlier exec that writes while the commit is applied
// (seconds) had its change folded into the baseline unseen, never on the
// host, and sent there later inside the next write of that file
// (TestRebaseAfterCommitSeesDaemon). First the workspace is diffed without
// folding and compared (a difference rebases nothing); then the fold's own
// diff is compared again, for the moment in between.
func (s *Session) Rebase(ctx context.Context, committed *Diff) error {
	now, err := s.Diff(ctx, false)
	if err != nil {
		return err
	}
	if ps := committed.drift(now); len(ps) > 0 {
		return &DriftError{Paths: ps}
	}
	folded, err := s.Diff(ctx, true)
	if err != nil {
		return err
	}
	if ps := committed.drift(folded); len(ps) > 0 {
		return &DriftError{Paths: ps, Folded: true}
	}
	return nil
}

// drift lists the paths whose change differs between d and o: written with
// other content, linked elsewhere, deleted in one only, another mode.
func (d *Diff) drift(o *Diff) []string {
	var out []string
	deleted := func(x *Diff, p string) bool { return slices.Contains(x.Deletes, p) }
	for _, p := range slices.Compact(slices.Sorted(slices.Values(append(d.Paths(), o.Paths()...)))) {
		a, aok := d.Writes[p]
		b, bok := o.Writes[p]
		al, alok := d.Links[p]
		bl, blok := o.Links[p]
		am, amok := d.Modes[p]
		bm, bmok := o.Modes[p]
		if aok != bok || !bytes.Equal(a, b) || alok != blok || al != bl || amok != bmok || am != bm || deleted(d, p) != deleted(o, p) {
			out = append(out, p)
		}
	}
	return out
}

// pullDiff asks the guest for a diff (verb, body) and reads its contents.
func (s *Session) pullDiff(ctx context.Context, verb string, body any) (*Diff, error) {
	f, err := s.call(ctx, verb, body)
	if err != nil {
		return nil, err
	}
	var wd wire.Diff
	if err := f.Decode(&wd); err != nil {
		return nil, err
	}
	d := &Diff{Writes: map[string][]byte{}, Links: map[string]string{}, Deletes: wd.Deletes, Modes: map[string]fs.FileMode{}}
	for _, m := range wd.Modes {
		d.Modes[m.Path] = fs.FileMode(m.Mode)
	}
	for _, w := range wd.Writes {
		d.Modes[w.Path] = fs.FileMode(w.Mode)
		if w.Link != "" {
			d.Links[w.Path] = w.Link
			continue
		}
		// After a rebase the contents are in the new baseline, which the
		// workspace shows: read_file finds them either way.
		b, err := s.readFile(ctx, w.Path, w.Size)
		if err != nil {
			return nil, err
		}
		d.Writes[w.Path] = b
	}
	return d, nil
}

func (s *Session) readFile(ctx context.Context, p string, size int64) ([]byte, error) {
	buf := make([]byte, 0, size)
	for int64(len(buf)) < size {
		f, err := s.call(ctx, wire.VerbReadFile, &wire.ReadFile{Path: p, Offset: int64(len(buf))})
		if err != nil {
			return nil, err
		}
		if len(f.Bin) != 1 || len(f.Bin[0]) == 0 {
			return nil, fmt.Errorf("%w: short read of %s", dryexec.ErrGuest, p)
		}
		buf = append(buf, f.Bin[0]...)
	}
	if int64(len(buf)) != size {
		return nil, fmt.Errorf("%w: %s is %d bytes, the diff said %d", dryexec.ErrGuest, p, len(buf), size)
	}
	return buf, nil
}

// Reset puts the workspace back to the baseline.
func (s *Session) Reset(ctx context.Context) error {
	_, err := s.call(ctx, wire.VerbReset, nil)
	return err
}

// PushTar replaces the workspace (and baseline) with the tree in a tar stream.
func (s *Session) PushTar(ctx context.Context, r io.Reader) error {
	return s.pushStream(ctx, r, wire.VerbPushEnd, nil)
}

// pushStream sends a tar stream as push_tree.begin and data, ended by
// endVerb (push_tree.end: replace the tree; apply.end: write it over).
func (s *Session) pushStream(ctx context.Context, r io.Reader, endVerb string, endBody any) error {
	if _, err := s.call(ctx, wire.VerbPushBegin, nil); err != nil {
		return err
	}
	buf := make([]byte, wire.MaxAttachment)
	for {
		var bin [][]byte
		var done bool
		for len(bin) < wire.MaxAttachments {
			n, err := io.ReadFull(r, buf)
			if n > 0 {
				bin = append(bin, append([]byte(nil), buf[:n]...))
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				done = true
				break
			}
			if err != nil {
				return fmt.Errorf("session: reading tree: %w", err)
			}
		}
		if len(bin) > 0 {
			if _, err := s.call(ctx, wire.VerbPushData, nil, bin...); err != nil {
				return err
			}
		}
		if done {
			break
		}
	}
	_, err := s.call(ctx, endVerb, endBody)
	return err
}

// PushDir replaces the workspace with a copy of host directory dir.
func (s *Session) PushDir(ctx context.Context, dir string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, dir)) }()
	err := s.PushTar(ctx, pr)
	pr.Close()
	return err
}

func writeTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// Close shuts the guest down and removes what the session kept on the host.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		s.hostCancel()
		if s.peer != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s.peer.Call(ctx, wire.VerbShutdown, nil)
			cancel()
		}
		s.sb.Close()
		if s.peer != nil {
			<-s.runErr
		}
		s.fork.mu.Lock()
		f := s.fork.family
		s.fork.mu.Unlock()
		f.release()
	})
	return nil
}

// killExec has the sandbox kill what the last exec started, if its guest's
// end does not (the host rung's: the ns rung's pid namespace needs no help).
func (s *Session) killExec() {
	s.execMu.Lock()
	sid := s.execSID
	s.execSID = 0
	s.execMu.Unlock()
	s.sb.KillExec(sid)
}

// guestPID is the guest supervisor's host pid.
func (s *Session) guestPID() int { return s.sb.GuestPID() }

// GuestPID is the host pid of the session's guest supervisor (the sandbox's
// processes are beneath it on the ns rung): what measurements look at. A
// pooled session's guest was started before the session was handed out.
func (s *Session) GuestPID() int { return s.guestPID() }
