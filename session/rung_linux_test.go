package session

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung"
)

// TestCheckRung: a session opens on a rung that holds sessions, and any
// other rung is refused with an IsolationUnavailableError saying why: not
// available here, not built for this OS, or (vm) no sessions yet.
func TestCheckRung(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		rung string
		want string // "" for a rung that holds sessions
	}{
		{"host", ""},
		{"gvisor", ""},
		{"vm", "sessions are not supported on vm yet"},
		{"seatbelt", "seatbelt is macOS's sandbox"},
	}
	for _, tc := range tests {
		t.Run(tc.rung, func(t *testing.T) {
			if _, err := rung.Select(ctx, tc.rung); err != nil && tc.rung != "seatbelt" {
				t.Skipf("%s unavailable here: %v", tc.rung, err)
			}
			err := CheckRung(ctx, tc.rung)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var iu *dryexec.IsolationUnavailableError
			if !errors.As(err, &iu) || iu.Rung != tc.rung || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v: want an IsolationUnavailableError of %s saying %q", err, tc.rung, tc.want)
			}
			if _, err := Open(ctx, Options{Rung: tc.rung}); !errors.As(err, &iu) {
				t.Fatalf("Open: %v, want the same refusal", err)
			}
		})
	}
}
