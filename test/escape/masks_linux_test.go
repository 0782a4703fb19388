package escape

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/rung/linuxns"
	"golang.org/x/sys/unix"
)

// TestMaskedSecretViaBindAlias: a masked credential dir is reachable on the
// host by a second path when its filesystem is mounted there too (a bind
// mount of a parent: a home bind-mounted into a workspace, a container's
// volume). The sandbox overlays every host mount on its own, so a mask on one
// path left the other showing the credential: `cat ALIAS/.ssh/id_rsa`
// printed the key. Every such alias is masked as well, and the read is
// recorded like a read of the masked path.
func TestMaskedSecretViaBindAlias(t *testing.T) {
	testreq.NeedRoot(t)
	rungs := []struct {
		name  string
		rung  func(t *testing.T) dryexec.Rung
		stamp bool // the rung records reads of masks
	}{
		{"ns", func(t *testing.T) dryexec.Rung {
			testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
			return &linuxns.Rung{}
		}, true},
		{"gvisor", func(t *testing.T) dryexec.Rung {
			testreq.Need(t, testreq.GVisor, (&gvisor.Rung{}).Available(context.Background()))
			return &gvisor.Rung{}
		}, false},
	}
	for _, rc := range rungs {
		t.Run(rc.name, func(t *testing.T) {
			r := rc.rung(t)
			tmp := t.TempDir()
			data, alias, work := tmp+"/data", tmp+"/alias", tmp+"/work"
			for _, d := range []string{data + "/.ssh", alias, work} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(data+"/.ssh/id_rsa", []byte(secretText), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount(data, alias, "", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Unmount(alias, unix.MNT_DETACH) })
			// The secret dir itself bind-mounted on its own, too.
			direct := tmp + "/keys"
			if err := os.Mkdir(direct, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount(data+"/.ssh", direct, "", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Unmount(direct, unix.MNT_DETACH) })
			before := snapshot(t, data)
			script := `for p in "$DATA/.ssh/id_rsa" "$ALIAS/.ssh/id_rsa" "$KEYS/id_rsa" /proc/self/root"$ALIAS/.ssh/id_rsa"; do cat "$p"; echo; done
cp -r "$ALIAS/.ssh" ./stolen; cat ./stolen/id_rsa; echo tried`
			spec := dryexec.TrialSpec{
				Action: dryexec.Action{Argv: []string{"/bin/sh", "-c", script}, Cwd: work, TimeoutMS: 60_000,
					Env: map[string]string{"PATH": "/usr/bin:/bin", "DATA": data, "ALIAS": alias, "KEYS": direct}},
				Masks: []string{data + "/.ssh"},
			}
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			d, err := r.Trial(ctx, spec)
			if err != nil {
				t.Fatalf("trial: %v", err)
			}
			validate(t, d)
			out := d.Process.Stdout + d.Process.Stderr
			if strings.Contains(out, secretText) {
				t.Errorf("the masked credential was read through a bind alias:\n%s", out)
			}
			if !strings.Contains(out, "tried") {
				t.Errorf("the script did not finish:\n%s", out)
			}
			for _, f := range d.Files {
				if f.SHA256 != "" && f.Size == int64(len(secretText)) {
					t.Errorf("the delta carries the credential's content: %s", f.Path)
				}
			}
			if got := snapshot(t, data); !maps(before, got) {
				t.Errorf("host changed:\nbefore %v\nafter  %v", before, got)
			}
			if rc.stamp && !slices.ContainsFunc(d.Violations, func(v dryexec.Violation) bool {
				return v.Kind == dryexec.ViolationSecret && (strings.HasPrefix(v.Detail, alias) || strings.HasPrefix(v.Detail, direct))
			}) {
				t.Errorf("no secret violation for the alias; violations %+v", d.Violations)
			}
		})
	}
}
