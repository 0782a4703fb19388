package vm_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/rungcompare"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/rung/vm"
	"github.com/dryexec/dryexec/wire"
)

// TestImageOnFirecracker runs trials on an OCI image with the rung's VMM
// Firecracker — fctest's fake backed by QEMU (vm.QEMUFirecracker), so a
// real guest in a real VM behind every API call checked — and requires
// the same delta as on QEMU and on ns (cases of TestImageSameDeltaAsNS),
// the calls Firecracker needs (the erofs drive read-only, the upper
// drive, the vsock, the start) and no refusal; then a trial on an image
// with a network, and one on the host's view, run on QEMU and say why.
func TestImageOnFirecracker(t *testing.T) {
	requireVM(t)
	r := &vm.Rung{VMM: vm.VMMQEMU}
	t.Setenv("DRYEXEC_HOME", t.TempDir())
	calls := vm.QEMUFirecracker(t, r)
	fc := &vm.Rung{VMM: vm.VMMFirecracker, Firecracker: r.Firecracker}
	root := rungcompare.PullImage(t, rungcompare.AwkwardImage(t))
	run := func(t *testing.T, r dryexec.Rung, spec dryexec.TrialSpec, cwd string, argv ...string) *dryexec.StateDelta {
		t.Helper()
		spec.Action = dryexec.Action{Argv: argv, Cwd: cwd, Env: map[string]string{"PATH": "/usr/bin:/bin"}}
		d, err := r.Trial(t.Context(), spec)
		if err != nil {
			t.Fatalf("%s: %v", r.Name(), err)
		}
		return d
	}
	want := map[string]bool{"files": true, "whiteouts": true, "exit": true}
	for _, c := range rungcompare.ImageCases() {
		if !want[c.Name] {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			argv := c.Args[slices.Index(c.Args, "--")+1:]
			spec := dryexec.TrialSpec{Image: root}
			before := len(calls(t))
			fd := run(t, fc, spec, "/w", argv...)
			got := calls(t)[before:]
			qd := run(t, r, spec, "/w", argv...)
			nsd := run(t, &linuxns.Rung{}, spec, "/w", argv...)
			if w := strings.Join(fd.Warnings, "\n"); !strings.Contains(w, "vmm firecracker: ") {
				t.Errorf("the delta does not say Firecracker ran: %q", fd.Warnings)
			}
			ns, q, f := rungcompare.Of(nsd, "/w", c.SetMtimes), rungcompare.Of(qd, "/w", c.SetMtimes), rungcompare.Of(fd, "/w", c.SetMtimes)
			if !reflect.DeepEqual(ns, f) {
				t.Errorf("ns and firecracker differ:\n%s", rungcompare.DiffFields(ns, f, "ns", "firecracker"))
			}
			if !reflect.DeepEqual(q, f) {
				t.Errorf("qemu and firecracker differ:\n%s", rungcompare.DiffFields(q, f, "qemu", "firecracker"))
			}
			var routes []string
			for _, call := range got {
				routes = append(routes, call.Method+" "+call.Path)
				if call.Violation || call.Status >= 300 {
					t.Errorf("refused: %+v", call)
				}
				if call.Path == "/drives/"+wire.VMImageSerial && call.Body["is_read_only"] != true {
					t.Errorf("the image's drive is not read-only: %+v", call.Body)
				}
			}
			wantRoutes := []string{"GET /", "PUT /machine-config", "PUT /boot-source", "PUT /drives/" + wire.VMImageSerial,
				"PUT /drives/" + wire.VMUpperSerial, "PUT /vsock", "PUT /actions"}
			if !slices.Equal(routes, wantRoutes) {
				t.Errorf("firecracker's calls %q, want %q", routes, wantRoutes)
			}
		})
	}
	t.Run("falls_back", func(t *testing.T) {
		before := len(calls(t))
		d := run(t, fc, dryexec.TrialSpec{Image: root, Net: []string{"allow:example.com"}, NetCADir: filepath.Join(t.TempDir(), "ca")}, "/w", "true")
		if w := strings.Join(d.Warnings, "\n"); !strings.Contains(w, "but trials with a network run on QEMU") {
			t.Errorf("a networked image trial's delta does not say why QEMU ran: %q", d.Warnings)
		}
		d = run(t, fc, dryexec.TrialSpec{}, t.TempDir(), "true")
		if w := strings.Join(d.Warnings, "\n"); !strings.Contains(w, "but trials on the host's view run on QEMU") {
			t.Errorf("a host-view trial's delta does not say why QEMU ran: %q", d.Warnings)
		}
		if n := len(calls(t)) - before; n != 0 {
			t.Errorf("firecracker answered %d calls for trials that run on QEMU", n)
		}
	})
	vm.NoFCLeftovers(t)
}

// TestImageOnFirecrackerVMMKilled: the VMM (the fake firecracker, and the
// QEMU it runs, both in the trial's cgroup) SIGKILLed while the command
// runs ends the trial with a delta marked incomplete, which policy blocks,
// and nothing left: no process, cgroup, socket or the VMM's sockets and
// drives in the private temp dir.
func TestImageOnFirecrackerVMMKilled(t *testing.T) {
	requireVM(t)
	t.Setenv("DRYEXEC_HOME", t.TempDir())
	r := &vm.Rung{VMM: vm.VMMFirecracker}
	vm.QEMUFirecracker(t, r)
	root := rungcompare.PullImage(t, rungcompare.AwkwardImage(t))
	socksBefore := sockets(t)
	w := &markerWriter{seen: make(chan struct{})}
	spec := dryexec.TrialSpec{TrialID: dryexec.NewTrialID(), Image: root, Stdout: w, Limits: faultLimits,
		Action: dryexec.Action{Argv: []string{"sh", "-c", "echo started; sleep 600"}, Cwd: "/w", TimeoutMS: 300_000,
			Env: map[string]string{"PATH": "/usr/bin:/bin"}}}
	faulted := make(chan struct{})
	go func() {
		defer close(faulted)
		select {
		case <-w.seen:
		case <-time.After(4 * time.Minute):
			t.Error("no marker from the command")
			return
		}
		pids := groupPIDs(t, vmGroups(spec.TrialID))
		if len(pids) != 2 {
			t.Errorf("in the VM's cgroup %v: want the fake firecracker and its QEMU", pids)
		}
		for _, p := range pids {
			if b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/comm"); !strings.HasPrefix(string(b), "qemu") {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
	}()
	d, err := r.Trial(t.Context(), spec)
	<-faulted
	faultedDelta(t, d, err, spec.TrialID, socksBefore)
	vm.NoFCLeftovers(t)
	t.Logf("incomplete: %s", d.IncompleteReason)
}
