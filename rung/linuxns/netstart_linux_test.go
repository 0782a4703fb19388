package linuxns

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup"
	"github.com/dryexec/dryexec/netsim/ca"
	"github.com/dryexec/dryexec/netsim/netproc"
	"github.com/dryexec/dryexec/netsim/tun"
)

// TestNetsimStartFailsAfterGuest: the netsim role's start runs beside the
// guest's (startTrialNet), so it can fail once the guest is running. The
// trial then fails with the start's error, and nothing of it is left: no
// child of this process (the guest reaped), no cgroup of the trial. (An
// allow rule: with the network "none" the role starts only once the
// sandbox sends a packet, and `true` sends none.)
func TestNetsimStartFailsAfterGuest(t *testing.T) {
	requireNS(t)
	missing := filepath.Join(t.TempDir(), "no-such-netsim")
	t.Setenv(netproc.ExeEnv, missing)
	spec := dryexec.TrialSpec{TrialID: dryexec.NewTrialID(), Net: []string{"allow:example.com:443"},
		Action: dryexec.Action{Argv: []string{"true"}, Cwd: t.TempDir(), Env: testPath}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := (&Rung{}).Trial(ctx, spec)
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("trial with no netsim binary: delta %v, err %v; want the start's error naming %s", d != nil, err, missing)
	}
	for _, g := range cgroup.Leftovers() {
		if strings.Contains(g, spec.TrialID) {
			t.Errorf("the trial's cgroup is left: %s", g)
		}
	}
	if kids := children(t); len(kids) > 0 {
		t.Errorf("processes left as this process's children: %v", kids)
	}
}

// children lists this process's live children (every thread's).
func children(t *testing.T) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		out = append(out, strings.Fields(string(b))...)
	}
	return out
}

// TestTrustBundleInSandbox: the bundle a trial's sandbox trusts (its guest
// makes it from the host's roots and netsim's CA, wire.TrialStart's
// TrustSystem) is byte for byte the host's roots followed by netsim's CA,
// as netsim.TrustOf makes it, whether netsim's role starts (an allow rule)
// or not (none); and the sandbox cannot change it.
func TestTrustBundleInSandbox(t *testing.T) {
	requireNS(t)
	system, err := os.ReadFile(tun.SystemBundle)
	if err != nil {
		t.Skipf("no system bundle at %s on this host: %v", tun.SystemBundle, err)
	}
	caDir := t.TempDir()
	c, err := ca.LoadOrCreate(caDir)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(c.Bundle(system))
	if !bytes.HasSuffix(c.Bundle(system), c.CertPEM()) {
		t.Fatal("netsim's bundle does not end with its CA")
	}
	for _, net := range [][]string{nil, {"allow:example.com:443"}} {
		spec := dryexec.TrialSpec{Net: net, NetCADir: caDir}
		d := runTrial(t, t.TempDir(), spec, "sh", "-c",
			"sha256sum "+tun.SystemBundle+"; echo x >> "+tun.SystemBundle+" 2>/dev/null && echo WRITABLE; echo \"$SSL_CERT_FILE\"")
		got := strings.Fields(d.Process.Stdout)
		if len(got) != 3 || got[0] != hex.EncodeToString(want[:]) || got[2] != tun.SystemBundle {
			t.Errorf("--net %v: the sandbox's bundle: %q (stderr %q), want sha256 %x, not writable, SSL_CERT_FILE %s",
				net, d.Process.Stdout, d.Process.Stderr, want, tun.SystemBundle)
		}
	}
}
