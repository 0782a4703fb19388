package linuxns_test

import (
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/rootless"
)

// TestContainmentRootless re-runs the masked-secrets tests and the rlimit
// fallback as an unprivileged user, whose cgroups this host's v1 tree refuses.
func TestContainmentRootless(t *testing.T) {
	rootless.Rerun(t, "^(TestMaskedSecrets|TestRlimitFallback)$", 5*time.Minute)
}
