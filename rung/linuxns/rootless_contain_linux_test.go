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

// TestPreforkRootless: a pooled sandbox's pre-started command process as an
// unprivileged user (its user namespace maps the caller's ids).
func TestPreforkRootless(t *testing.T) {
	rootless.Rerun(t, "^TestPreforkSameAsFork$", 5*time.Minute)
}
