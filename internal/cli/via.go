package cli

import (
	"context"
	"fmt"

	"github.com/dryexec/dryexec/internal/apiclient"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/server"
)

// Where `dryexec run` runs its trial: --via, else $DRYEXEC_VIA, else auto
// (the user's daemon when one of this install answers, in-process
// otherwise). docs/api.md, "dryexec run through the daemon".
const (
	viaAuto   = "auto"
	viaDaemon = "daemon"
	viaLocal  = "local"
)

// viaMode is the --via value in effect: the flag, else DRYEXEC_VIA, else auto.
func viaMode(flag string, env Env) (string, error) {
	v, from := flag, "--via"
	if v == "" {
		v, from = env.Getenv("DRYEXEC_VIA"), "DRYEXEC_VIA"
	}
	switch v {
	case "":
		return viaAuto, nil
	case viaAuto, viaDaemon, viaLocal:
		return v, nil
	}
	return "", usageError{fmt.Errorf("%s %q: want auto (the daemon if one answers, else in-process), daemon or local", from, v)}
}

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
