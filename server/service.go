package server

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/apiclient"
	"github.com/dryexec/dryexec/netsim"
	"github.com/dryexec/dryexec/netsim/mockfile"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/receipt"
	"github.com/dryexec/dryexec/rung"
	"github.com/dryexec/dryexec/runner"
	"github.com/dryexec/dryexec/session"
	"github.com/dryexec/dryexec/store"
	"github.com/dryexec/dryexec/wire"
)

// Config configures a Service. Zero fields take the defaults named beside them.
type Config struct {
	// StoreDir holds the trials (dryexec.DefaultHome's answer, usually).
	StoreDir string
	// StateDir holds the daemon's own records (token, pid, live sessions' host
	// leftovers) so the next start can clean what a crash left. Default:
	// StoreDir/serve.
	StateDir string
	// Socket is the unix socket the daemon listens on, if not the default
	// (DefaultSocket). It, the default socket, StoreDir and StateDir are
	// hidden whole from every ns sandbox (ownPaths).
	Socket string
	// TTL is how long trials are kept (0: store.DefaultTTL).
	TTL time.Duration
	// ParkTTL is how long a parked session is kept on disk (0:
	// DefaultParkTTL): past it, `dryexec gc` (and the next daemon's
	// Recover) removes it.
	ParkTTL time.Duration
	// StoreLimits bound what the store keeps (zero fields: store's defaults).
	StoreLimits store.Limits
	// MaxTrials is how many trials run at once (default 4); MaxQueue how many
	// more may wait for a slot (default 64). Beyond that a request is refused
	// with ErrBusy (HTTP 503) rather than held without bound.
	MaxTrials int
	MaxQueue  int
	// MaxSessions bounds live sessions (default 32).
	MaxSessions int
	// SessionIdle closes a session no request touched for this long (default
	// 30 min; negative: never), so a client that vanished frees its sandbox.
	SessionIdle time.Duration
	// HostCallTimeout bounds how long a guest's host-object call waits for the
	// SDK to answer (default 2 min).
	HostCallTimeout time.Duration
	// Getenv and Environ are the daemon's environment, from which a trial's
	// environment is built through dryexec.SandboxEnv's allowlist.
	Getenv  func(string) string
	Environ []string
	// GuestExe is the binary re-executed as the guest (default /proc/self/exe).
	GuestExe string
	// Pool is how many ns sandboxes are kept prepared for trials (the warm
	// pool: a trial then pays only for its command and its diff); 0 keeps
	// none. A trial asking for another sandbox than the daemon's default
	// (limits, masks, network, upper size) runs cold. PoolIdle lets the
	// pool empty after that long without a trial (0: 5 minutes).
	Pool     int
	PoolIdle time.Duration
	// SessionPool is how many ns sessions are kept open ahead for session
	// requests with the daemon's defaults (no env, workspace, limits, masks,
	// network or output cap of their own); 0 keeps none.
	SessionPool int
	// VMPool and VMSessionPool are the same for the vm rung: VMs booted
	// ahead for vm trials and vm sessions with the daemon's defaults (each
	// idle VM holds QEMU, its RAM as touched and a netsim process); 0 keeps
	// none. Without a vm rung here, none is kept.
	VMPool, VMSessionPool int
	// Policy is the daemon's policy (`serve --policy`): every trial is
	// decided by it, or by a request's own policy document on top of
	// policy.Default, and signed with the install's key, as `dryexec run`
	// does. Nil: policy.Default(). There is no way to run a trial undecided.
	Policy *policy.Policy
	// Busy, when set, is told of the work the service does, for a process
	// that sizes itself by it (dryexec serve's GOMAXPROCS, package
	// internal/maxprocs): each request that may run something (every
	// method but GET) while it is served, with background false, and each
	// sandbox or session its pools prepare and each image it makes ready,
	// with background true. The function it returns ends that work.
	Busy func(background bool) (done func())
	// Version is reported by /v1/version.
	Version string
	// Log receives the daemon's records; nil logs nothing.
	Log *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.StateDir == "" {
		c.StateDir = filepath.Join(c.StoreDir, "serve")
	}
	if c.ParkTTL <= 0 {
		c.ParkTTL = DefaultParkTTL
	}
	if c.MaxTrials <= 0 {
		c.MaxTrials = 4
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = 64
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = 32
	}
	if c.SessionIdle == 0 {
		c.SessionIdle = 30 * time.Minute
	}
	if c.HostCallTimeout <= 0 {
		c.HostCallTimeout = 2 * time.Minute
	}
	if c.Getenv == nil {
		c.Getenv = func(string) string { return "" }
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Version == "" {
		c.Version = "devel"
	}
	return c
}

// ErrBusy: every trial slot is taken and the queue is full; retry later.
var ErrBusy = errors.New("server busy")

// ErrSessionNotFound: no live session has that id.
var ErrSessionNotFound = errors.New("session not found")

// ErrPolicy: a request asks for something the allowlists refuse (a host object
// without an explicit method list, a wildcard, …).
var ErrPolicy = errors.New("refused by policy")

// ErrNotRepresentable: a value cannot cross the json/bytes/file codec.
var ErrNotRepresentable = errors.New("value not representable")

// Service is the daemon's core: trials through a bounded queue, the store, and
// live sessions. Its methods are safe for concurrent use.
type Service struct {
	cfg   Config
	store *store.Store
	state *stateDir
	slots *queue

	// ctx is cancelled by Close: running trials are killed, sessions closed.
	ctx    context.Context
	cancel context.CancelFunc
	trials sync.WaitGroup // running trials

	// runner is the trial pipeline (the one `dryexec run` uses) over the
	// store and the install's key; engine is the daemon's policy compiled.
	runner *runner.Runner
	engine *policy.Engine

	pool        dryexec.Pool  // nil: every ns trial runs cold
	sessionPool *session.Pool // nil: every session opens cold
	// vmPool and vmSessionPool: the vm rung's (nil: none).
	vmPool        dryexec.Pool
	vmSessionPool *session.Pool

	mu       sync.Mutex // guards sessions and closed
	sessions map[string]*Live
	// parked are the sessions this daemon parked (park.go).
	parked map[string]*parkedLive
	closed bool

	// listen is the TCP address Serve listens on ("" for a unix socket):
	// no network rule of a trial or session may reach it.
	listen atomic.Pointer[string]
}

// NewService opens the store and the daemon's state dir, loads the install's
// receipt key and compiles the daemon's policy. It cleans nothing: a daemon
// calls Recover at start-up, before it serves.
func NewService(cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	if cfg.StoreDir == "" {
		return nil, errors.New("server: no store directory")
	}
	st, err := store.Open(cfg.StoreDir, cfg.TTL)
	if err != nil {
		return nil, err
	}
	st.SetLimits(cfg.StoreLimits)
	sd, err := openStateDir(cfg.StateDir, cfg.Log)
	if err != nil {
		return nil, err
	}
	signer, err := receipt.LoadOrCreate(cfg.StoreDir)
	if err != nil {
		return nil, err
	}
	run, err := runner.New(st, signer)
	if err != nil {
		return nil, err
	}
	base := policy.Default()
	if cfg.Policy != nil {
		base = *cfg.Policy
	}
	engine, err := policy.Compile(base)
	if err != nil {
		return nil, fmt.Errorf("server: the daemon's policy: %w", err)
	}
	s := &Service{cfg: cfg, store: st, state: sd, slots: newQueue(cfg.MaxTrials, cfg.MaxQueue), sessions: map[string]*Live{}, parked: map[string]*parkedLive{},
		runner: run, engine: engine}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.SessionIdle > 0 {
		go s.reapIdle()
	}
	s.startPool()
	s.startVMPools()
	// The daemon records trial after trial: each takes a directory made
	// ahead, between trials, rather than making one on its request's path
	// (store.KeepSpare).
	st.KeepSpare()
	return s, nil
}

// Recover cleans what an earlier daemon, or a `dryexec run`, killed before it
// finished left: its sandboxes' groups and whatever still runs in them,
// interrupted commits, half-recorded and expired trials (runner.Recover and
// store.Sweep), and what its host-rung sessions left running and on disk
// (the state dir's records), and expired, damaged or half-done parks
// (GCParks; complete parks stay, for this daemon to resume). A daemon calls
// it once at start-up, before it serves; nothing else does it implicitly. Sessions of another live daemon
// sharing the state dir are left alone, but a record with this process's pid
// is taken for a previous daemon's (a container's daemon often has the same
// pid each start): called later, it would end this daemon's own host
// sessions.
func (s *Service) Recover() error {
	rec, err := runner.Recover(s.store)
	if rec.Groups > 0 {
		s.cfg.Log.Info("removed the groups of sandboxes whose process is gone, and what ran in them", "groups", rec.Groups)
	}
	for _, r := range rec.Commits {
		s.cfg.Log.Info("recovered an interrupted commit", "trial", r.Trial, "committed", r.Committed)
	}
	if err != nil {
		return err
	}
	if n, err := s.store.Sweep(); err != nil {
		return err
	} else if n+rec.Leftovers > 0 {
		s.cfg.Log.Info("removed expired or half-recorded trials", "count", n+rec.Leftovers)
	}
	s.state.cleanLeftovers()
	if n, err := dryexec.SweepPrivateTemp(os.Getenv); err != nil {
		return err
	} else if n > 0 {
		s.cfg.Log.Info("removed what forks or uploads of processes that are gone left", "count", n)
	}
	removed, err := GCParks(s.cfg.StoreDir, time.Now())
	for _, r := range removed {
		s.cfg.Log.Info("removed a parked session", "session", r.SessionID, "reason", r.Reason, "bytes", r.Bytes)
	}
	return err
}

// Config returns the configuration in effect (defaults filled).
func (s *Service) Config() Config { return s.cfg }

// Store is the trial store the service uses.
func (s *Service) Store() *store.Store { return s.store }

// TrialRequest is one trial to run. Argv and Cwd are required.
type TrialRequest struct {
	Argv []string `json:"argv"`
	// Cwd is an absolute host path; the command starts there in the sandbox.
	Cwd string `json:"cwd"`
	// Env sets variables (they win over the allowlist); PassEnv passes the
	// daemon's variables by name (a name may end in "*").
	Env     map[string]string `json:"env,omitempty"`
	PassEnv []string          `json:"pass_env,omitempty"`
	// TimeoutMS kills the command and all it started (0: none).
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Rung is ns (default), or best.
	Rung string `json:"rung,omitempty"`
	// Stdin is given to the command (absent: /dev/null).
	Stdin *string `json:"stdin,omitempty"`
	// OutputCap bounds stdout and stderr each (0: 1 MiB).
	OutputCap int `json:"output_cap,omitempty"`
	// UpperSizeBytes bounds what the trial may write (0: 2 GiB).
	UpperSizeBytes int64 `json:"upper_size_bytes,omitempty"`
	// NoStore runs without keeping the trial (no commit later).
	NoStore bool `json:"no_store,omitempty"`
	// Policy is a policy document (docs/decision.md; the SDK's Environment)
	// on top of the daemon's; absent: the daemon's policy.
	Policy json.RawMessage `json:"policy,omitempty"`
	// Limits bound the trial's processes (zero: the defaults,
	// docs/limits.md); Masks are extra host paths the sandbox sees empty.
	Limits         *LimitsRequest `json:"limits,omitempty"`
	Masks          []string       `json:"masks,omitempty"`
	NoDefaultMasks bool           `json:"no_default_masks,omitempty"`
	// Net says what the sandbox's network reaches, as `run --net`: "none"
	// (default), "mock:/abs/FILE" (a file on the daemon's host), or
	// "allow:HOST[:PORT][/PREFIX],…" (docs/network.md).
	Net []string `json:"net,omitempty"`
	// EnvExact makes Env the trial's whole environment (with PWD): nothing
	// of the daemon's own is added. `dryexec run` sends the environment it
	// built from its caller's, so that a trial sees the same variables
	// whichever process runs it.
	EnvExact bool `json:"env_exact,omitempty"`
	// ContentCap bounds the file content the store keeps of this trial, as
	// `run --content-cap` (0: the store's limit; -1: none; docs/limits.md).
	ContentCap int64 `json:"content_cap,omitempty"`
	// Image runs the trial on this OCI image's root filesystem instead of
	// the host's, as `run --image` (docs/images.md): Cwd is then a path in
	// the image (empty: its WorkingDir, else /), the environment is the
	// image's Env under Env and what PassEnv names (the daemon's allowlist is
	// not added), and commit needs a target directory (CommitRequest.To).
	Image string `json:"image,omitempty"`
	// Home, when set, is the store the client records its trials in (its
	// DRYEXEC_HOME, absolute): a daemon whose store is another directory
	// refuses the trial before it starts (409 other_home). `dryexec run`
	// sends it instead of asking GET /v1/version first: one round trip
	// less per trial.
	Home string `json:"home,omitempty"`
}

// LimitsRequest is dryexec.Limits in a request.
type LimitsRequest struct {
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	CPUWeight   int     `json:"cpu_weight,omitempty"`
}

func (l *LimitsRequest) limits() dryexec.Limits {
	if l == nil {
		return dryexec.Limits{}
	}
	return dryexec.Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPUs: l.CPUs, CPUWeight: l.CPUWeight}
}

// checkMasks refuses mask paths that are not absolute and clean.
func checkMasks(masks []string) error {
	for i, m := range masks {
		if err := checkHostPath(fmt.Sprintf("masks[%d]", i), m); err != nil {
			return err
		}
	}
	return nil
}

// keyMask is the install's receipt key, masked in every sandbox: a command
// that could read it could forge receipts (as `dryexec run` does).
func (s *Service) keyMask() string { return receipt.KeyPath(s.cfg.StoreDir) }

// netCADir holds netsim's per-install CA, where `dryexec run` keeps it; masked
// in every sandbox like the receipt key (its key could forge any certificate).
func (s *Service) netCADir() string { return filepath.Join(s.cfg.StoreDir, "netsim-ca") }

// CheckSeed refuses a host directory as a session's seed when copying it in
// would carry what every sandbox's view hides (a credential mask, the
// daemon's own state, the receipt key) into the sandbox: the copy is made
// outside the sandbox, with the daemon's rights, so the view's covers do not
// apply to it. dir is refused when it is at or beneath a covered path, or
// holds one.
func (s *Service) CheckSeed(dir string) error {
	own := s.runner.Protect(dryexec.TrialSpec{OwnPaths: s.ownPaths()})
	covered, err := rung.Covered(append(own.OwnPaths, own.Masks...))
	if err != nil {
		return err
	}
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	for _, c := range covered {
		if r, err := filepath.EvalSymlinks(c); err == nil {
			c = r
		}
		if c == dir || strings.HasPrefix(dir, c+"/") || strings.HasPrefix(c, strings.TrimSuffix(dir, "/")+"/") {
			return fmt.Errorf("%w: %s would carry %s into the sandbox, which every sandbox's view hides (credentials, dryexec's own state); seed from a directory that does not hold it", ErrPolicy, dryexec.QuotePath(dir), dryexec.QuotePath(c))
		}
	}
	return nil
}

// ownPaths are where the daemon keeps its own state: its home (every
// trial's delta and blobs, the receipt key, netsim's CA), its state dir (the
// bearer token, live sessions' records) and its socket. Every ns trial and
// session of the daemon hides them whole, whatever the request says
// (no_default_masks included): a sandbox that could read the token or call
// the socket could approve and commit its own trial.
func (s *Service) ownPaths() []string {
	out := []string{s.cfg.StoreDir, s.cfg.StateDir, DefaultSocket(s.cfg.Getenv, s.cfg.StateDir)}
	if s.cfg.Socket != "" {
		out = append(out, s.cfg.Socket)
	}
	for i, p := range out {
		if abs, err := filepath.Abs(p); err == nil {
			out[i] = abs
		}
	}
	return out
}

// Limits on a request's fields: each is far beyond real use and keeps one
// request from holding the daemon's memory.
const (
	maxArgs      = 4096
	maxEnv       = 4096
	maxStdin     = 64 << 20
	maxOutputCap = 64 << 20
)

func (r *TrialRequest) check() error {
	if len(r.Argv) == 0 || r.Argv[0] == "" {
		return badRequest("argv: want at least the command, e.g. [\"sh\", \"-c\", \"echo hi\"]")
	}
	if len(r.Argv) > maxArgs || len(r.Env) > maxEnv || len(r.PassEnv) > maxEnv {
		return badRequest("argv, env or pass_env: more than %d entries", maxArgs)
	}
	for i, a := range r.Argv {
		if strings.ContainsRune(a, 0) {
			return badRequest("argv[%d] contains a NUL byte", i)
		}
	}
	if r.Image == "" || r.Cwd != "" {
		if err := checkHostPath("cwd", r.Cwd); err != nil {
			return err
		}
	}
	if err := checkRungName(r.Rung); err != nil {
		return err
	}
	for k, v := range r.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return badRequest("env: %q is not a usable variable name (or its value has a NUL)", k)
		}
	}
	if r.TimeoutMS < 0 || r.OutputCap < 0 || r.UpperSizeBytes < 0 {
		return badRequest("timeout_ms, output_cap and upper_size_bytes must not be negative")
	}
	if r.ContentCap < -1 {
		return badRequest("content_cap %d: want bytes, 0 (the store's limit) or -1 (none)", r.ContentCap)
	}
	if r.EnvExact && len(r.PassEnv) > 0 {
		return badRequest("pass_env names the daemon's variables, env_exact says none of them are used: choose one")
	}
	if r.OutputCap > maxOutputCap {
		return badRequest("output_cap %d: at most %d", r.OutputCap, maxOutputCap)
	}
	if r.Stdin != nil && len(*r.Stdin) > maxStdin {
		return badRequest("stdin: more than %d bytes", maxStdin)
	}
	if err := r.Limits.limits().Check(); err != nil {
		return badRequest("limits: %v", err)
	}
	if err := checkNet(r.Net); err != nil {
		return err
	}
	return checkMasks(r.Masks)
}

// checkNet checks a request's net specs: each parses, and a mock file is an
// absolute host path.
func checkNet(specs []string) error {
	var nc netsim.Config
	for i, spec := range specs {
		if f, ok := strings.CutPrefix(spec, "mock:"); ok {
			if err := checkHostPath(fmt.Sprintf("net[%d] mock file", i), f); err != nil {
				return err
			}
		}
		if err := nc.AddSpec(spec); err != nil {
			return badRequest("net[%d]: %v", i, err)
		}
	}
	return nil
}

// checkRungName refuses a rung this build does not know ("" is the default).
func checkRungName(name string) error {
	if name == "" || name == "best" || slices.Contains(rung.Names(), name) {
		return nil
	}
	return badRequest("rung %q: unknown; choose one of %s, or best", name, strings.Join(rung.Names(), ", "))
}

// checkNetRules judges the allow rules of specs (already parsed by checkNet),
// the mock file's included, before any sandbox starts: a mock file that
// cannot be read, or a rule that reaches the daemon's own listener, is a bad
// request with what to do.
func (s *Service) checkNetRules(ctx context.Context, specs []string) error {
	var nc netsim.Config
	for _, spec := range specs {
		if err := nc.AddSpec(spec); err != nil {
			return badRequest("net: %v", err)
		}
	}
	rules, err := mockfile.Rules(&nc)
	if err != nil {
		return badRequest("net: %v", err)
	}
	if l := s.listen.Load(); l != nil {
		if err := CheckReach(ctx, rules, *l, nil); err != nil {
			return badRequest("net: %v", err)
		}
	}
	return nil
}

// TrialHooks lets a caller watch a trial while it runs. Every field may be nil.
type TrialHooks struct {
	// Queued is called if the trial has to wait for a slot.
	Queued func()
	// Started is called with the trial's id once it holds a slot.
	Started func(id string)
	// Stdout and Stderr receive the output as it is produced.
	Stdout, Stderr io.Writer
}

// RunTrial runs one trial to its end and returns its delta, stored (unless
// NoStore) and decided. It waits for a slot; ErrBusy if the queue is full.
func (s *Service) RunTrial(ctx context.Context, req TrialRequest, hooks TrialHooks) (*dryexec.StateDelta, error) {
	begun := time.Now()
	if err := req.check(); err != nil {
		return nil, err
	}
	if req.Home != "" && !apiclient.SameDir(req.Home, s.cfg.StoreDir) {
		return nil, &requestError{status: 409, code: "other_home",
			msg: fmt.Sprintf("this daemon records its trials in %s, not in %s", s.cfg.StoreDir, req.Home)}
	}
	if err := s.checkNetRules(ctx, req.Net); err != nil {
		return nil, err
	}
	if req.Rung == "" {
		req.Rung = "ns"
	}
	env := map[string]string{}
	if !req.EnvExact {
		sandboxEnv := dryexec.SandboxEnv
		if req.Image != "" {
			sandboxEnv = dryexec.ImageCallerEnv
		}
		var err error
		if env, err = sandboxEnv(s.cfg.Getenv, s.cfg.Environ, req.PassEnv, nil); err != nil {
			return nil, err
		}
	}
	for k, v := range req.Env {
		env[k] = v
	}
	env["PWD"] = req.Cwd
	engine, err := s.engineFor(req.Policy)
	if err != nil {
		return nil, err
	}
	var r dryexec.Rung = s.pool
	if req.Rung == "vm" {
		r = s.vmPool
	}
	if (req.Rung != "ns" && req.Rung != "vm") || r == nil {
		if r, err = rung.Select(ctx, req.Rung); err != nil {
			return nil, err
		}
	}
	// The service's context ends at shutdown: a trial still running then is
	// killed rather than left behind.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	release, err := s.slots.acquire(ctx, hooks.Queued)
	if err != nil {
		return nil, err
	}
	defer release()
	if !s.beginTrial() {
		return nil, fmt.Errorf("%w: the daemon is shutting down", ErrBusy)
	}
	defer s.trials.Done()
	spec := dryexec.TrialSpec{
		Action:    dryexec.Action{Argv: req.Argv, Cwd: req.Cwd, Env: env, TimeoutMS: req.TimeoutMS},
		OutputCap: req.OutputCap, UpperSizeBytes: req.UpperSizeBytes,
		Stdout: hooks.Stdout, Stderr: hooks.Stderr,
		Limits: req.Limits.limits(), Masks: slices.Clone(req.Masks), NoDefaultMasks: req.NoDefaultMasks,
		OwnPaths: s.ownPaths(), Net: req.Net,
	}
	if req.Stdin != nil {
		spec.Stdin = strings.NewReader(*req.Stdin)
	}
	if req.Image != "" {
		img, release, err := s.imageFor(ctx, req.Image)
		if err != nil {
			return nil, err
		}
		defer release()
		spec.Image = img
		spec.Action = dryexec.ImageAction(spec.Action, img)
		spec.Action.Env["PWD"] = spec.Action.Cwd
	}
	// When each phase ended goes into the log line, so that where a
	// trial's time went in the daemon reads from its log, without a
	// profiler or a rebuild: prep (the checks, a slot, the spec), run (the
	// rung's trial: the sandbox, the command, the delta), record (the
	// decision, the signature, the store).
	var started, ran time.Time
	d, err := s.runner.Run(ctx, r, engine, spec, runner.Options{NoStore: req.NoStore, ContentCap: req.ContentCap, Started: func(id string) {
		if hooks.Started != nil {
			hooks.Started(id)
		}
		s.cfg.Log.Debug("trial start", "trial", id, "argv", req.Argv)
		started = time.Now()
	}, Ran: func() { ran = time.Now() }})
	if err != nil {
		return nil, err
	}
	s.cfg.Log.Info("trial done", "trial", d.TrialID, "exit", d.Process.ExitCode, "files", d.Totals.FilesChanged,
		"prep", started.Sub(begun), "run", ran.Sub(started), "record", time.Since(ran))
	return d, nil
}

func (s *Service) beginTrial() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.trials.Add(1)
	return true
}

// Trial returns a stored trial and its state.
func (s *Service) Trial(id string) (*dryexec.StateDelta, store.State, error) {
	if !store.ValidID(id) {
		return nil, store.State{}, badRequest("%q is not a trial id (tr_ and 20 letters or digits)", id)
	}
	d, err := s.store.Load(id)
	if err != nil {
		return nil, store.State{}, err
	}
	st, err := s.store.StateOf(id)
	return d, st, err
}

// TrialExchanges returns a stored trial's network exchanges (netsim records
// as JSON; nil when none were kept).
func (s *Service) TrialExchanges(id string) ([]byte, error) {
	if _, _, err := s.Trial(id); err != nil {
		return nil, err
	}
	return s.store.Exchanges(id)
}

// TrialSummary is one entry of Trials.
type TrialSummary struct {
	TrialID      string    `json:"trial_id"`
	Created      time.Time `json:"created"`
	Status       string    `json:"status"`
	Argv         []string  `json:"argv"`
	ExitCode     int       `json:"exit_code"`
	FilesChanged int       `json:"files_changed"`
	Decision     string    `json:"decision"`
}

// Trials lists stored trials, newest first.
func (s *Service) Trials() ([]TrialSummary, error) {
	list, err := s.store.List()
	if err != nil {
		return nil, err
	}
	out := make([]TrialSummary, 0, len(list))
	for _, t := range list {
		out = append(out, TrialSummary{TrialID: t.ID, Created: t.Created.UTC(), Status: t.State.Status, Argv: t.Delta.Action.Argv,
			ExitCode: t.Delta.Process.ExitCode, FilesChanged: t.Delta.Totals.FilesChanged, Decision: t.Delta.Decision.Choice})
	}
	return out, nil
}

// CommitRequest selects what to commit.
type CommitRequest struct {
	// Paths are absolute host paths; empty commits everything. A directory
	// selects everything beneath it.
	Paths []string `json:"paths,omitempty"`
	// Force says a person decided: it commits a trial the policy blocked
	// (the override is recorded with the trial) and commits even where the
	// host changed since the trial (never through a symlink). Without it a
	// blocked trial is refused: 403 blocked.
	Force bool `json:"force,omitempty"`
	// To is the host directory a trial that ran on an image commits onto:
	// what it changed beneath its workspace lands beneath To, nothing else
	// of it is committable (docs/images.md). Required for such a trial
	// (else 409 image_commit), refused for any other; Paths then name
	// paths beneath To.
	To string `json:"to,omitempty"`
	// By names the interface the request came through ("api", "mcp"), set
	// by that interface, never by its caller (no JSON field): a forced
	// commit of a blocked trial is recorded as this, so an override an
	// agent made through MCP does not pass for a person's at the terminal.
	By string `json:"-"`
}

// Commit applies trial id's changes to the host.
func (s *Service) Commit(ctx context.Context, id string, req CommitRequest) ([]dryexec.FileChange, error) {
	if !store.ValidID(id) {
		return nil, badRequest("%q is not a trial id", id)
	}
	for i, p := range req.Paths {
		if err := checkHostPath(fmt.Sprintf("paths[%d]", i), p); err != nil {
			return nil, err
		}
	}
	if req.To != "" {
		if err := checkHostPath("to", req.To); err != nil {
			return nil, err
		}
	}
	if len(req.Paths) > 0 {
		if d, err := s.store.Load(id); err == nil {
			if d, _, err = store.MapImage(d, req.To); err != nil {
				return nil, err
			}
			if err := CheckCommitPaths(d, req.Paths); err != nil {
				return nil, badRequest("%v", err)
			}
		}
	}
	by := req.By
	if by == "" {
		by = "api"
	}
	// The user dryexec runs as is not who asked, but it says whose it was.
	by += ", dryexec running as " + store.ProcessUser()
	opt := store.CommitOptions{Paths: req.Paths, Force: req.Force, AllowBlocked: req.Force, To: req.To, By: by}
	if req.To != "" {
		// The daemon's policy judges where an image trial's changes land.
		opt.Redecide = func(ctx context.Context, d *dryexec.StateDelta) dryexec.Decision {
			return s.engine.Decide(ctx, d).Decision
		}
	}
	applied, err := s.store.Commit(ctx, id, opt)
	if applied == nil && err == nil {
		applied = []dryexec.FileChange{}
	}
	return applied, err
}

// Discard drops trial id without changing the host.
func (s *Service) Discard(id string) error {
	if !store.ValidID(id) {
		return badRequest("%q is not a trial id", id)
	}
	return s.store.Discard(id)
}

// SessionRequest opens a session.
type SessionRequest struct {
	// Rung is ns (default) or host.
	Rung string `json:"rung,omitempty"`
	// Workspace is where the workspace appears in the sandbox (ns; default
	// /workspace).
	Workspace string            `json:"workspace,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	OutputCap int               `json:"output_cap,omitempty"`
	// Shell is "" (bash where the sandbox has it, else sh), "bash", "sh" or
	// an absolute path in the sandbox.
	Shell string `json:"shell,omitempty"`
	// CacheReadOnly refuses the sandbox's cache writes.
	CacheReadOnly bool `json:"cache_read_only,omitempty"`
	// HostObjects names the objects the client serves, each with the methods
	// the sandbox may call (an explicit list: no wildcards).
	HostObjects map[string][]string `json:"host_objects,omitempty"`
	// Limits, Masks and NoDefaultMasks are as in TrialRequest (ns rung).
	Limits         *LimitsRequest `json:"limits,omitempty"`
	Masks          []string       `json:"masks,omitempty"`
	NoDefaultMasks bool           `json:"no_default_masks,omitempty"`
	// Net is the session's network, as TrialRequest.Net (ns rung; default
	// none).
	Net []string `json:"net,omitempty"`
	// Cache is the cache's initial content (session.Options.Cache).
	Cache map[string]CacheItem `json:"cache,omitempty"`
	// NoHostGlobals binds host objects only as host.NAME.
	NoHostGlobals bool `json:"no_host_globals,omitempty"`
	// PythonWarm starts a Python runner at open (session.Options.PythonWarm).
	PythonWarm bool `json:"python_warm,omitempty"`
	// Image opens the session on this OCI image's root filesystem instead
	// of the host's (ns rung; docs/images.md): the workspace is mounted over
	// it, and Env goes on top of the image's Env (without Env: the image's,
	// with the session's defaults for what it does not set).
	Image string `json:"image,omitempty"`
}

// CacheItem is one initial cache value: bytes (base64 in JSON) and a kind, ""
// or "pickle" (the caller pickled it; only the sandbox unpickles it).
type CacheItem struct {
	Bytes []byte `json:"bytes"`
	Kind  string `json:"kind,omitempty"`
}

// Live is one open session.
type Live struct {
	ID      string
	Session *session.Session
	Created time.Time
	Objects map[string][]string
	calls   *hostQueue
	// imageRelease lets rm and prune have the session's image layers
	// again once it is closed (nil: not on an image).
	imageRelease func()
	// parent is the session this one was forked from ("": none).
	parent string

	mu   sync.Mutex // guards used
	used time.Time
}

func (l *Live) touch() {
	l.mu.Lock()
	l.used = time.Now()
	l.mu.Unlock()
}

func (l *Live) idleSince() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.used
}

// SessionInfo describes a live session.
type SessionInfo struct {
	SessionID   string              `json:"session_id"`
	Rung        string              `json:"rung"`
	Staging     string              `json:"staging"`
	Workspace   string              `json:"workspace"`
	Python      string              `json:"python"`
	Shell       string              `json:"shell"`
	Created     time.Time           `json:"created"`
	HostObjects map[string][]string `json:"host_objects"`
	// Warnings say what the session does not enforce as asked (e.g. no
	// network interception without /dev/net/tun).
	Warnings []string `json:"warnings,omitempty"`
}

// Info describes l.
func (l *Live) Info() SessionInfo {
	p := l.Session.Info()
	objs := l.Objects
	if objs == nil {
		objs = map[string][]string{}
	}
	return SessionInfo{SessionID: l.ID, Rung: p.Rung, Staging: p.Staging, Workspace: p.Workspace, Python: p.Python, Shell: p.Shell, Created: l.Created.UTC(), HostObjects: objs,
		Warnings: l.Session.Warnings()}
}

const maxHostObjects = 64

// OpenSession starts a session. Its host objects are served by whoever polls
// its host calls (the Python SDK).
func (s *Service) OpenSession(ctx context.Context, req SessionRequest) (*Live, error) {
	if req.Rung == "" {
		req.Rung = "ns"
	}
	if err := checkRungName(req.Rung); err != nil {
		return nil, err
	}
	// The session package's own check, before anything else is done for
	// the session: a rung gains sessions by implementing them, not by
	// being named here.
	if err := session.CheckRung(ctx, req.Rung); err != nil {
		return nil, err
	}
	if req.Workspace != "" {
		if err := checkHostPath("workspace", req.Workspace); err != nil {
			return nil, err
		}
		if req.Workspace == "/" {
			return nil, badRequest("workspace: / cannot be the workspace")
		}
	}
	if req.OutputCap < 0 || req.OutputCap > maxOutputCap {
		return nil, badRequest("output_cap: between 0 and %d", maxOutputCap)
	}
	if err := checkCacheInit(req.Cache); err != nil {
		return nil, err
	}
	if err := session.CheckShell(req.Shell); err != nil {
		return nil, badRequest("%v", err)
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, badRequest("env: %q is not a usable variable name (or its value has a NUL)", k)
		}
	}
	if err := req.Limits.limits().Check(); err != nil {
		return nil, badRequest("limits: %v", err)
	}
	if err := checkMasks(req.Masks); err != nil {
		return nil, err
	}
	if err := checkNet(req.Net); err != nil {
		return nil, err
	}
	if err := s.checkNetRules(ctx, req.Net); err != nil {
		return nil, err
	}
	if len(req.HostObjects) > maxHostObjects {
		return nil, badRequest("host_objects: more than %d", maxHostObjects)
	}
	id := newSessionID()
	q := newHostQueue(s.cfg.HostCallTimeout)
	objs := map[string]any{}
	allow := map[string][]string{}
	for name, methods := range req.HostObjects {
		if !validObjectName(name) {
			return nil, badRequest("host_objects: %q is not a Python identifier", name)
		}
		for _, m := range methods {
			if m == "" || strings.Contains(m, "*") {
				return nil, fmt.Errorf("%w: host object %q: allow lists each method by name (got %q)", ErrPolicy, name, m)
			}
		}
		objs[name] = &forwarder{q: q, object: name}
		allow[name] = methods
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the daemon is shutting down", ErrBusy)
	}
	if len(s.sessions) >= s.cfg.MaxSessions {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %d sessions are open (the limit); close one", ErrBusy, len(s.sessions))
	}
	// Reserve the slot while the sandbox starts.
	s.sessions[id] = nil
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		delete(s.sessions, id)
		s.mu.Unlock()
	}
	opt := s.sessionOptions(req)
	if len(objs) > 0 {
		opt.HostObjects, opt.Allow = objs, allow
	}
	opt.Cache, opt.NoHostGlobals = cacheItems(req.Cache), req.NoHostGlobals
	var imageRelease func()
	if req.Image != "" {
		img, rel, err := s.imageFor(ctx, req.Image)
		if err != nil {
			release()
			q.close()
			return nil, err
		}
		// An image session never comes from the pool (its template is the
		// host's view): session.Pool opens it cold.
		opt.Image, imageRelease = img, rel
	}
	open := session.Open
	if s.sessionPool != nil {
		open = s.sessionPool.Open
	}
	if opt.Rung == "vm" && s.vmSessionPool != nil {
		open = s.vmSessionPool.Open
	}
	sess, err := open(ctx, opt)
	if err != nil {
		if imageRelease != nil {
			imageRelease()
		}
		release()
		q.close()
		if strings.Contains(err.Error(), "Allow") {
			return nil, fmt.Errorf("%w: %v", ErrPolicy, err)
		}
		return nil, err
	}
	l := &Live{ID: id, Session: sess, Created: time.Now(), Objects: req.HostObjects, calls: q, used: time.Now(), imageRelease: imageRelease}
	if err := s.state.recordSession(id, sess.Info()); err != nil {
		s.cfg.Log.Warn("recording a session for crash cleanup", "session", id, "err", err)
	}
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.sessions[id] = l
	}
	s.mu.Unlock()
	if closed {
		s.closeLive(l)
		return nil, fmt.Errorf("%w: the daemon is shutting down", ErrBusy)
	}
	s.cfg.Log.Info("session open", "session", id, "rung", req.Rung)
	return l, nil
}

// Session returns live session id.
func (s *Service) Session(id string) (*Live, error) {
	s.mu.Lock()
	l := s.sessions[id]
	s.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("%w: %q", ErrSessionNotFound, id)
	}
	l.touch()
	return l, nil
}

// Sessions lists the live sessions, oldest first.
func (s *Service) Sessions() []SessionInfo {
	s.mu.Lock()
	var ls []*Live
	for _, l := range s.sessions {
		if l != nil {
			ls = append(ls, l)
		}
	}
	s.mu.Unlock()
	out := make([]SessionInfo, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.Info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out
}

// CloseSession closes live session id and removes what it kept on the host.
func (s *Service) CloseSession(id string) error {
	s.mu.Lock()
	l := s.sessions[id]
	if l != nil {
		delete(s.sessions, id)
	}
	s.mu.Unlock()
	if l == nil {
		return fmt.Errorf("%w: %q", ErrSessionNotFound, id)
	}
	s.closeLive(l)
	return nil
}

func (s *Service) closeLive(l *Live) {
	l.calls.close()
	l.Session.Close()
	if l.imageRelease != nil {
		l.imageRelease()
	}
	s.state.forgetSession(l.ID)
	s.cfg.Log.Info("session closed", "session", l.ID)
}

// reapIdle closes sessions no request has touched for SessionIdle.
func (s *Service) reapIdle() {
	t := time.NewTicker(min(s.cfg.SessionIdle/4+time.Second, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		var idle []string
		for id, l := range s.sessions {
			if l != nil && time.Since(l.idleSince()) > s.cfg.SessionIdle {
				idle = append(idle, id)
			}
		}
		s.mu.Unlock()
		for _, id := range idle {
			s.cfg.Log.Info("closing an idle session", "session", id)
			s.CloseSession(id)
		}
	}
}

// Counts reports running and queued trials and live sessions.
func (s *Service) Counts() (running, queued, sessions int) {
	running, queued = s.slots.counts()
	s.mu.Lock()
	sessions = len(s.sessions)
	s.mu.Unlock()
	return
}

// Drain stops new trials and sessions and waits, until ctx ends, for running
// trials to finish. Close then kills whatever is left.
func (s *Service) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.trials.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close kills running trials, closes every session and removes the daemon's
// records of them; parked sessions stay on disk for a later daemon. The
// service cannot be used afterwards.
func (s *Service) Close() error {
	s.mu.Lock()
	s.closed = true
	ls := make([]*Live, 0, len(s.sessions))
	for id, l := range s.sessions {
		if l != nil {
			ls = append(ls, l)
		}
		delete(s.sessions, id)
	}
	s.mu.Unlock()
	// A parked session stays on disk for the next daemon to resume.
	s.releaseParked()
	s.cancel()
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() { defer wg.Done(); s.closeLive(l) }()
	}
	wg.Wait()
	s.trials.Wait()
	if s.pool != nil {
		s.pool.Close()
	}
	if s.sessionPool != nil {
		s.sessionPool.Close()
	}
	if s.vmPool != nil {
		s.vmPool.Close()
	}
	if s.vmSessionPool != nil {
		s.vmSessionPool.Close()
	}
	s.store.DropSpare()
	return nil
}

// sessionOptions are the options of a session for req (host objects aside).
func (s *Service) sessionOptions(req SessionRequest) session.Options {
	return session.Options{Rung: req.Rung, Workspace: req.Workspace, Env: req.Env, OutputCap: req.OutputCap, Shell: req.Shell,
		GuestExe: s.cfg.GuestExe, Log: s.cfg.Log, CacheReadOnly: req.CacheReadOnly, PythonWarm: req.PythonWarm,
		Limits: req.Limits.limits(), Masks: append(slices.Clone(req.Masks), s.keyMask(), s.netCADir()), NoDefaultMasks: req.NoDefaultMasks,
		OwnPaths: s.ownPaths(), Net: req.Net, NetCADir: s.netCADir()}
}

// startPool starts the warm pool for trials with the daemon's defaults:
// those RunTrial builds for a request that sets no limits, masks, network
// or upper size. Without the ns rung the daemon runs without a pool.
func (s *Service) startPool() {
	if s.cfg.SessionPool > 0 && nsAvailable(s.ctx) == nil {
		s.sessionPool = session.NewPool(s.ctx, session.PoolOptions{Size: s.cfg.SessionPool, IdleTimeout: s.cfg.PoolIdle,
			Template: s.sessionOptions(SessionRequest{}), Background: s.cfg.background})
	}
	if s.cfg.Pool <= 0 {
		return
	}
	// Protected as RunTrial's specs are (by the runner), so that they
	// compare equal.
	template := s.runner.Protect(dryexec.TrialSpec{OwnPaths: s.ownPaths()})
	p, err := newPool(s.ctx, s.cfg, poolRung, s.cfg.Pool, template)
	if err != nil {
		s.cfg.Log.Warn("no warm pool: every ns trial starts cold", "err", err)
		return
	}
	s.pool = p
}

// startVMPools starts the vm rung's pools the configuration asks for, once
// a VM boots here (the probe's result is kept until the host's next boot).
func (s *Service) startVMPools() {
	if s.cfg.VMPool <= 0 && s.cfg.VMSessionPool <= 0 {
		return
	}
	if _, err := rung.Select(s.ctx, "vm"); err != nil {
		s.cfg.Log.Warn("no vm pool: every vm trial and session boots cold", "err", err)
		return
	}
	if s.cfg.VMSessionPool > 0 {
		tmpl := s.sessionOptions(SessionRequest{Rung: "vm"})
		s.vmSessionPool = session.NewPool(s.ctx, session.PoolOptions{Size: s.cfg.VMSessionPool, IdleTimeout: s.cfg.PoolIdle, Template: tmpl,
			Background: s.cfg.background})
	}
	if s.cfg.VMPool > 0 {
		template := s.runner.Protect(dryexec.TrialSpec{OwnPaths: s.ownPaths()})
		p, err := newPool(s.ctx, s.cfg, "vm", s.cfg.VMPool, template)
		if err != nil {
			s.cfg.Log.Warn("no vm pool: every vm trial boots cold", "err", err)
			return
		}
		s.vmPool = p
	}
}

func newSessionID() string {
	var b [13]byte
	rand.Read(b[:])
	return "se_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))[:20]
}

func validSessionID(id string) bool {
	if len(id) != 23 || !strings.HasPrefix(id, "se_") {
		return false
	}
	for _, c := range id[3:] {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

func validObjectName(n string) bool {
	if n == "" || len(n) > 128 || n[0] >= '0' && n[0] <= '9' || strings.HasPrefix(n, "_") {
		return false
	}
	for _, c := range n {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// valueCheck reports a codec value that cannot cross the boundary.
func valueCheck(field string, v *wire.Value) error {
	if v.Type == "file" && hasDotDot(v.Path) {
		return badRequest("%s: a file value's path may not contain ..: %q", field, v.Path)
	}
	switch v.Type {
	case "json", "bytes", "file":
	default:
		return fmt.Errorf("%w: %s: type %q (want json, bytes or file)", ErrNotRepresentable, field, v.Type)
	}
	return nil
}
