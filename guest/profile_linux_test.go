package guest

import (
	"runtime"
	"testing"

	"github.com/dryexec/dryexec/containment/seccomp"
)

// TestProfilesNameKnownCalls: every rule of the command's seccomp profiles
// names a call the compiler knows on amd64 (where every call they name
// exists), since a rule for an unknown name is silently left out — the
// gvisor rung's FIFO refusal did nothing until mknodat was in the table.
func TestProfilesNameKnownCalls(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the reference table is amd64's; arm64 lacks mknod, rename and link by design")
	}
	// 32-bit x86 calls, in the profile as in Docker's; no amd64 number.
	i386 := map[string]bool{"umount": true, "vm86": true, "vm86old": true, "stime": true}
	for name, p := range map[string]*seccomp.Profile{"default": seccomp.Default(), "gvisor": gvisorProfile()} {
		for _, r := range p.Rules {
			if !seccomp.Known(r.Name) && !i386[r.Name] {
				t.Errorf("%s profile: rule for %q (%s), a call the compiler does not know", name, r.Name, r.Why)
			}
		}
	}
}
