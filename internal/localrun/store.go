package localrun

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/runner"
	"github.com/dryexec/dryexec/store"
)

// StartStore is the start-up of every command that uses the store: it
// opens the store and then recovers what a killed dryexec left
// (runner.Recover's two parts: the store's before it returns, so that every
// such command starts from a clean store; the dead sandboxes' cgroups
// beside the command, env.Sweep).
func StartStore(env Env) (*store.Store, error) {
	dir, err := dryexec.DefaultHome(env.Getenv)
	if err != nil {
		return nil, err
	}
	ttl, err := EnvDuration(env, "DRYEXEC_TRIAL_TTL", "24h")
	if err != nil {
		return nil, err
	}
	s, err := store.Open(dir, ttl)
	if err != nil {
		return nil, err
	}
	lim, err := StoreLimits(env)
	if err != nil {
		return nil, err
	}
	s.SetLimits(lim)
	// Start-up recovery, explicitly (opening a store has no side effects):
	// what a killed dryexec left — its sandboxes' groups and what still runs
	// in them, interrupted commits, half-recorded trials — is cleaned before
	// the command uses the store. The rest of the store's cleaning (expired
	// trials, content of finished ones) is AutoGC's, after the command's
	// output.
	env.Sweep.Start()
	rec, err := runner.RecoverStore(s)
	for _, r := range rec.Commits {
		if r.Committed {
			fmt.Fprintf(env.Stderr, "dryexec: finished the interrupted commit of %s\n", r.Trial)
		} else {
			fmt.Fprintf(env.Stderr, "dryexec: rolled back the interrupted commit of %s; the host is as it was\n", r.Trial)
		}
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// EnvDuration reads the positive duration in the variable name (0 when it
// is unset: the default); example is one to show in the usage error.
func EnvDuration(env Env, name, example string) (time.Duration, error) {
	v := env.Getenv(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, UsageError{fmt.Errorf("%s=%q: want a positive duration like %s", name, v, example)}
	}
	return d, nil
}

// AutoGC cleans the store when that is due (store.GCDue: at most every ten
// minutes), called once a command has given its answer, so that the user
// does not wait for it. What crashes left went when the command opened
// the store (StartStore). Its failure is not the command's.
func AutoGC(s *store.Store) {
	if s != nil {
		s.GCDue()
	}
}

// StoreLimits reads what the store keeps on the host's disk from the
// environment (docs/limits.md); unset variables take the store's defaults.
func StoreLimits(env Env) (store.Limits, error) {
	var lim store.Limits
	for _, v := range []struct {
		name string
		to   *int64
	}{
		{"DRYEXEC_TRIAL_CONTENT_CAP", &lim.TrialBytes},
		{"DRYEXEC_STORE_QUOTA", &lim.TotalBytes},
		{"DRYEXEC_STORE_MIN_FREE", &lim.MinFreeBytes},
	} {
		var err error
		if *v.to, err = ParseBytes(env.Getenv(v.name)); err != nil {
			return lim, UsageError{fmt.Errorf("%s: %w", v.name, err)}
		}
	}
	return lim, nil
}

// ParseBytes reads a size: bytes, or a number with K, M, G (powers of 1024,
// an optional "i" and "B" after it); "" is 0 (the default), -1 no limit.
func ParseBytes(s string) (int64, error) {
	if s == "" || s == "-1" {
		return map[string]int64{"": 0, "-1": -1}[s], nil
	}
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(s), "B"), "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult, t = 1<<10, t[:n-1]
		case 'M':
			mult, t = 1<<20, t[:n-1]
		case 'G':
			mult, t = 1<<30, t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v <= 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size (want bytes, or a number with K, M or G)", s)
	}
	return v * mult, nil
}
