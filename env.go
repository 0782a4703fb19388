package dryexec

import (
	"fmt"
	"sort"
	"strings"
)

// EnvAllowlist is the caller's variables a sandbox sees by default: what
// programs need to find things and to print, nothing that usually carries a
// credential. Everything else reaches a sandbox only when the caller names it,
// because the command should not see it and the delta records the env.
var EnvAllowlist = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR",
	"COLORTERM", "NO_COLOR", "LC_*"}

// SandboxEnv builds the environment of an action from an allowlist — the one
// place every caller (CLI, server, sessions) gets it from. getenv reads the
// caller's variables; environ lists them all ("K=V") for "NAME*" patterns
// (nil: "LC_*" means glibc's locale categories, other patterns match
// nothing). names adds variables passed through by name (a name may end in
// "*"); set adds NAME=VALUE pairs, which win. A name with "=" or NUL is
// refused.
func SandboxEnv(getenv func(string) string, environ []string, names []string, set []string) (map[string]string, error) {
	env := map[string]string{}
	pass := func(pattern string) error {
		if pattern == "" || strings.ContainsAny(pattern, "=\x00") || strings.Contains(strings.TrimSuffix(pattern, "*"), "*") {
			return fmt.Errorf("%w: environment name %q", ErrBadAction, pattern)
		}
		if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
			if environ == nil && prefix == "LC_" {
				for _, k := range localeVars {
					if v := getenv(k); v != "" {
						env[k] = v
					}
				}
				return nil
			}
			for _, kv := range environ {
				if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, prefix) && k != "" && v != "" {
					env[k] = v
				}
			}
			return nil
		}
		if v := getenv(pattern); v != "" {
			env[pattern] = v
		}
		return nil
	}
	for _, n := range EnvAllowlist {
		if err := pass(n); err != nil {
			return nil, err
		}
	}
	for _, n := range names {
		if err := pass(n); err != nil {
			return nil, err
		}
	}
	for _, kv := range set {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			return nil, fmt.Errorf("%w: --env %q: want NAME=VALUE", ErrBadAction, kv)
		}
		env[k] = v
	}
	return env, nil
}

// localeVars are glibc's locale categories: what "LC_*" means when the
// caller cannot list its environment.
var localeVars = []string{"LC_ALL", "LC_CTYPE", "LC_NUMERIC", "LC_TIME", "LC_COLLATE", "LC_MONETARY", "LC_MESSAGES",
	"LC_PAPER", "LC_NAME", "LC_ADDRESS", "LC_TELEPHONE", "LC_MEASUREMENT", "LC_IDENTIFICATION"}

// EnvList renders env as sorted "K=V" strings, for execve.
func EnvList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
