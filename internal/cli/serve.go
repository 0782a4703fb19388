package cli

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/localrun"
	"github.com/dryexec/dryexec/internal/maxprocs"
	"github.com/dryexec/dryexec/mcpserver"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/server"
)

// buildVersion is the module version dryexec was built from ("devel" in a
// checkout).
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// vmPools are how many VMs the daemon boots ahead (--vm-pool,
// --vm-session-pool): none unless asked, since each idle VM holds memory.
type vmPools struct{ trials, sessions int }

// newService builds the daemon's core the way every front end (serve, mcp)
// shares: the CLI's store, the env allowlist over this process's environment,
// and the decision engine of `dryexec run`; then recovers (Service.Recover).
// busy, when not nil, is told of the service's work (server.Config.Busy).
func newService(env Env, log *slog.Logger, maxTrials, maxQueue, pool, sessionPool int, vm vmPools, poolIdle time.Duration, policyFile, socket string, busy func(bool) func()) (*server.Service, error) {
	dir, err := dryexec.DefaultHome(env.Getenv)
	if err != nil {
		return nil, err
	}
	ttl, err := localrun.EnvDuration(env, "DRYEXEC_TRIAL_TTL", "24h")
	if err != nil {
		return nil, err
	}
	parkTTL, err := localrun.EnvDuration(env, "DRYEXEC_PARK_TTL", "168h")
	if err != nil {
		return nil, err
	}
	base := policy.Default()
	if policyFile != "" {
		if base, err = policy.Load(policyFile); err != nil {
			return nil, usageError{err}
		}
	}
	lim, err := localrun.StoreLimits(env)
	if err != nil {
		return nil, err
	}
	svc, err := server.NewService(server.Config{
		StoreDir: dir, Socket: socket, TTL: ttl, ParkTTL: parkTTL, StoreLimits: lim, MaxTrials: maxTrials, MaxQueue: maxQueue, Pool: pool, SessionPool: sessionPool, PoolIdle: poolIdle,
		VMPool: vm.trials, VMSessionPool: vm.sessions,
		Getenv: env.Getenv, Environ: localrun.CallerEnviron(env), Version: buildVersion(), Log: log,
		Policy: &base, Busy: busy,
	})
	if err != nil {
		return nil, err
	}
	// The daemon's start-up recovery, explicitly: what a killed daemon or
	// run left is cleaned before anything is served.
	if err := svc.Recover(); err != nil {
		svc.Close()
		return nil, err
	}
	return svc, nil
}

// daemonProcs returns what sets the daemon's GOMAXPROCS from its work
// (internal/maxprocs: one P for a single request with nothing beside it,
// every CPU otherwise), or nil when $GOMAXPROCS sets it, which then holds.
func daemonProcs(env Env) func(background bool) (done func()) {
	if env.Getenv("GOMAXPROCS") != "" {
		return nil
	}
	g := maxprocs.New(runtime.GOMAXPROCS(0), runtime.GOMAXPROCS)
	return func(background bool) func() {
		if background {
			return g.Begin(maxprocs.Background)
		}
		return g.Begin(maxprocs.Request)
	}
}

func serveCmd(env Env) *cobra.Command {
	var (
		socket, listen, pol string
		maxTrials, maxQueue int
		pool, sessionPool   int
		vm                  vmPools
		drain, poolIdle     time.Duration
		verbose             bool
		mcpOpts             mcpserver.Options
	)
	c := &cobra.Command{
		Use:   "serve [--socket PATH | --listen ADDR]",
		Short: "Serve trials and sessions over a local HTTP API (and MCP at /mcp)",
		Long: "Serve the JSON API of docs/api.md on a unix socket (default $XDG_RUNTIME_DIR/dryexec.sock, mode 0600)\n" +
			"or, with --listen, on TCP where every request needs the bearer token kept in the state dir.\n" +
			"SIGTERM or SIGINT drains: running trials get --drain to finish, then everything is cleaned.",
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if socket != "" && listen != "" {
				return usageError{fmt.Errorf("--socket and --listen: choose one")}
			}
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))
			svc, err := newService(env, log, maxTrials, maxQueue, pool, sessionPool, vm, poolIdle, pol, socket, daemonProcs(env))
			if err != nil {
				return err
			}
			if socket == "" && listen == "" {
				socket = server.DefaultSocket(env.Getenv, svc.Config().StateDir)
			}
			cwd, _ := os.Getwd()
			opt := server.ServeOptions{Socket: socket, Listen: listen, Drain: drain,
				Handler: server.HandlerOptions{MCP: mcpserver.HTTPHandler(svc, buildVersion(), cwd, mcpOpts)},
				Ready: func(addr string) {
					if listen != "" {
						fmt.Fprintf(env.Stdout, "dryexec: serving on http://%s (bearer token in %s)\n", addr, server.TokenFile(svc.Config().StateDir))
					} else {
						fmt.Fprintf(env.Stdout, "dryexec: serving on unix:%s\n", addr)
					}
				}}
			return server.Serve(cmd.Context(), svc, opt)
		},
	}
	f := c.Flags()
	f.StringVar(&socket, "socket", "", "unix socket path (default $XDG_RUNTIME_DIR/dryexec.sock)")
	f.StringVar(&listen, "listen", "", "TCP address (host:port) instead of the socket; requests need the bearer token")
	f.IntVar(&maxTrials, "max-trials", 4, "trials run at once; more wait in the queue")
	f.IntVar(&maxQueue, "max-queue", 64, "trials that may wait for a slot; more are refused with 503 busy")
	f.IntVar(&pool, "pool", 2, "ns sandboxes kept prepared for trials (the warm pool); 0 for none")
	f.IntVar(&sessionPool, "session-pool", 1, "ns sessions kept open ahead for session requests with default options; 0 for none")
	f.IntVar(&vm.trials, "vm-pool", 0, "VMs booted ahead for vm trials with default options (each idle VM holds QEMU and its RAM); 0 for none")
	f.IntVar(&vm.sessions, "vm-session-pool", 0, "VMs booted ahead for vm sessions with default options; 0 for none")
	f.DurationVar(&poolIdle, "pool-idle", 5*time.Minute, "empty the pools after this long without a trial or session; they refill on the next")
	f.DurationVar(&drain, "drain", 30*time.Second, "on SIGTERM, how long running trials may take before they are killed")
	f.StringVar(&pol, "policy", "", "policy file (YAML or JSON, docs/decision.md) for trials whose request names none")
	f.BoolVarP(&verbose, "verbose", "v", false, "log every trial")
	f.BoolVar(&mcpOpts.AllowForce, "mcp-allow-force", false, "let /mcp clients' force through (commit over a policy block or a host change); off, only a person overrides")
	return c
}
