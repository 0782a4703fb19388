package cli

import (
	"context"

	"github.com/dryexec/dryexec/internal/apiclient"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/server"
)

// daemonSentinels are what the daemon's error codes unwrap to beyond the
// root package's (apiclient.Error): the errors the same failure is
// in-process, so that `run` exits with the same code either way.
func daemonSentinels() map[string]error {
	return map[string]error{"policy": policy.ErrInvalid, "busy": server.ErrBusy}
}

// findDaemon is apiclient.Find for this process's environment. `run --via
// daemon` that finds none is refused (exit 1, apiclient.ErrNoDaemon), like
// a rung that cannot run here: dryexec refuses rather than run the trial
// somewhere else than asked.
func findDaemon(ctx context.Context, env Env, home string) (*apiclient.Conn, error) {
	return apiclient.Find(ctx, env.Getenv, home, daemonSentinels())
}
