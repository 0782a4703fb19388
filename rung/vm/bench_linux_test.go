package vm

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dryexec/dryexec"

	"github.com/dryexec/dryexec/internal/rungbench"
	"github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// BenchmarkColdTrial times a cold /bin/true trial on vm, ns and gvisor, and
// QEMU's own boot of the same VM to its init's hello (no view, no command:
// the floor of a vm trial), interleaved in each iteration so that all meet
// the same machine; it reports each candidate's median (ms) and vm's ratio
// to ns:
//
//	go test -run '^$' -bench ColdTrial -benchtime 5x ./rung/vm
func BenchmarkColdTrial(b *testing.B) {
	r := &Rung{GuestExe: staticGuest(b)}
	if err := r.Available(context.Background()); err != nil {
		b.Skip(err)
	}
	cands := []rungbench.Candidate{
		rungbench.Trial(b, r),
		{Name: "vm_boot", Run: func() error { _, err := r.Boot(context.Background()); return err }},
		rungbench.Trial(b, &linuxns.Rung{}),
	}
	if (&gvisor.Rung{}).Available(context.Background()) == nil {
		cands = append(cands, rungbench.Trial(b, &gvisor.Rung{}))
	}
	med := rungbench.Interleave(b, cands)
	b.ReportMetric(med[0]/med[2], "vm/ns")
}

// BenchmarkNetTrial times what netsim costs a vm trial: a cold /bin/true
// trial with --net none (the VM's NIC and netsim's process, nothing
// allowed) and one whose command makes one mocked HTTPS request (DNS,
// netsim's TLS with a leaf certificate made for it, curl under TCG),
// interleaved:
//
//	go test -run '^$' -bench NetTrial -benchtime 3x ./rung/vm
func BenchmarkNetTrial(b *testing.B) {
	r := &Rung{GuestExe: staticGuest(b)}
	if err := r.Available(context.Background()); err != nil {
		b.Skip(err)
	}
	dir := b.TempDir()
	mock := filepath.Join(dir, "mock.yaml")
	if err := os.WriteFile(mock, []byte("routes:\n  - host: api.example.com\n    path: /v1/ping\n    json: {pong: true}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	trial := func(name string, net []string, argv ...string) rungbench.Candidate {
		spec := dryexec.TrialSpec{Net: net, NetCADir: filepath.Join(dir, "ca"), Action: dryexec.Action{Argv: argv, Cwd: dir, Env: testPath}}
		return rungbench.Candidate{Name: name, Run: func() error {
			d, err := r.Trial(context.Background(), spec)
			if err == nil && (d.Process.ExitCode != 0 || d.Incomplete) {
				b.Fatalf("%s: exit %d, incomplete %v, stderr %s", name, d.Process.ExitCode, d.Incomplete, d.Process.Stderr)
			}
			return err
		}}
	}
	med := rungbench.Interleave(b, []rungbench.Candidate{
		trial("none", nil, "/bin/true"),
		trial("mock_https", []string{"mock:" + mock}, "curl", "-sS", "-m", "120", "https://api.example.com/v1/ping"),
	})
	b.ReportMetric(med[1]-med[0], "https-ms")
}
