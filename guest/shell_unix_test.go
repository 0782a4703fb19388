//go:build unix

package guest

import (
	"slices"
	"testing"
)

// TestParseState: the environment is taken only when its listing is closed
// by the end mark, so a shell that could not start `env -0` (pids limit)
// does not wipe the session's environment; the cwd is taken either way.
func TestParseState(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		cwd         string
		env         []string
		envOK, ok   bool
		wantDropped []string
	}{
		{"complete", "\n/w\n\x00B=2\x00A=1\x00SHLVL=3\x00" + envEnd + "\x00", "/w", []string{"A=1", "B=2"}, true, true, nil},
		{"env -0 refused", "\n/w/sub\n\x00", "/w/sub", nil, false, true, nil},
		{"cut after env", "\n/w\n\x00A=1\x00", "/w", nil, false, true, nil},
		{"value ending in the mark text", "\n/w\n\x00X=" + envEnd + "\x00" + envEnd + "\x00", "/w", []string{"X=" + envEnd}, true, true, nil},
		{"dropped names", "BIG HUGE\n/w\n\x00" + envEnd + "\x00", "/w", nil, true, true, []string{"BIG", "HUGE"}},
		{"no cwd", "\n/w", "", nil, false, false, nil},
		{"empty", "", "", nil, false, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dropped, cwd, env, envOK, ok := parseState([]byte(tt.in))
			if ok != tt.ok || envOK != tt.envOK || cwd != tt.cwd || !slices.Equal(env, tt.env) || !slices.Equal(dropped, tt.wantDropped) {
				t.Errorf("parseState(%q) = %q, %q, %q, %v, %v; want %q, %q, %q, %v, %v",
					tt.in, dropped, cwd, env, envOK, ok, tt.wantDropped, tt.cwd, tt.env, tt.envOK, tt.ok)
			}
		})
	}
}
