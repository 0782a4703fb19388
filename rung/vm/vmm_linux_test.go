package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/bootstamp"
	"github.com/dryexec/dryexec/rung/vm/firecracker"
	"github.com/dryexec/dryexec/rung/vm/firecracker/fctest"
)

// fakeFirecrackerEnv makes the test binary stand in for the firecracker
// binary: a child started with it set runs fctest.Main (TestMain).
const fakeFirecrackerEnv = "DRYEXEC_TEST_AS_FIRECRACKER"

// fake is how the fake firecracker behaves (fctest's environment).
type fake struct {
	mode   string // fctest.ModeEnv: "", "silent", "exit"
	guest  string // fctest.GuestEnv: "hello", "garbage", "" (no guest)
	refuse string // fctest.RefuseEnv
}

// fcHost is a fake firecracker binary, a kernel and an initramfs for it to
// check, and the log of the calls it answered.
type fcHost struct {
	dir, bin, log, kernel, initramfs string
}

// fakeFirecracker makes `firecracker` in a short dir: this test binary,
// which serves fctest's fake API on the --api-sock it is given, as f says.
// The environment is the test's (t.Setenv), which the driver's child
// inherits.
func fakeFirecracker(t *testing.T, f fake) fcHost {
	t.Helper()
	dir, err := os.MkdirTemp("", "fcvm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := fcHost{dir: dir, bin: filepath.Join(dir, "firecracker"), log: filepath.Join(dir, "calls.json"),
		kernel: filepath.Join(dir, "vmlinux"), initramfs: filepath.Join(dir, "initramfs.cpio")}
	if err := os.Symlink(self, h.bin); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{h.kernel, h.initramfs} {
		if err := os.WriteFile(p, []byte("not really"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(fakeFirecrackerEnv, "1")
	t.Setenv(fctest.LogEnv, h.log)
	t.Setenv(fctest.ModeEnv, f.mode)
	t.Setenv(fctest.GuestEnv, f.guest)
	t.Setenv(fctest.GuestPortsEnv, strconv.Itoa(firecracker.VsockPortBase))
	t.Setenv(fctest.RefuseEnv, f.refuse)
	return h
}

// calls are the requests the fake answered, in order.
func (h fcHost) calls(t *testing.T) []fctest.Call {
	t.Helper()
	f, err := os.Open(h.log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var calls []fctest.Call
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c fctest.Call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	return calls
}

// runDir is a dir for the probe VM's sockets, checked empty at the end.
func (h fcHost) runDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(h.dir, "run")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// noLeftovers fails t if the probe left a file in runDir or a child
// process of the test's running.
func noLeftovers(t *testing.T, runDir string) {
	t.Helper()
	if ents, _ := os.ReadDir(runDir); len(ents) != 0 {
		t.Errorf("left in the run dir: %v", ents)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces, so after ')'.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) {
			t.Errorf("a child is left running: %s", s[:strings.LastIndexByte(s, ')')+1])
		}
	}
}

// TestFirecrackerBootProbe boots the probe VM through firecracker.Machine
// against the fake, whose guest greets over the vsock, and checks every
// request the fake answered, in order.
func TestFirecrackerBootProbe(t *testing.T) {
	h := fakeFirecracker(t, fake{guest: "hello"})
	run := h.runDir(t)
	vm := fcVM{binary: h.bin, kernel: h.kernel, initramfs: h.initramfs, memMB: 256, runDir: run}
	res, err := fcBootProbe(context.Background(), vm, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if res.VMM != VMMFirecracker || res.Accel != AccelKVM {
		t.Errorf("result %+v, want firecracker and kvm", res)
	}
	calls := h.calls(t)
	got := routes(calls)
	for _, c := range calls {
		if c.Violation || c.Status >= 300 {
			t.Errorf("%s %s: %d %s (violation %v)", c.Method, c.Path, c.Status, c.Fault, c.Violation)
		}
	}
	want := []string{"GET /", "PUT /machine-config", "PUT /boot-source", "PUT /vsock", "PUT /actions"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
	bodies := map[string]map[string]any{
		"PUT /machine-config": {"vcpu_count": 1.0, "mem_size_mib": 256.0},
		"PUT /boot-source":    {"kernel_image_path": h.kernel, "initrd_path": h.initramfs, "boot_args": fcKernelArgs()},
		"PUT /actions":        {"action_type": "InstanceStart"},
	}
	for _, c := range calls[1:] {
		if c.Path == "/vsock" {
			uds, _ := c.Body["uds_path"].(string)
			if c.Body["guest_cid"] != 3.0 || filepath.Dir(filepath.Dir(uds)) != run || filepath.Base(uds) != "vsock" || len(c.Body) != 2 {
				t.Errorf("vsock body %v, want guest_cid 3 and a socket in a dir of %s", c.Body, run)
			}
			continue
		}
		if w := bodies[c.Method+" "+c.Path]; !reflect.DeepEqual(c.Body, w) {
			t.Errorf("%s %s body %v, want %v", c.Method, c.Path, c.Body, w)
		}
	}
	if args := fcKernelArgs(); !strings.Contains(args, "reboot=k pci=off "+fcWireParam) || strings.Contains(args, "reboot=t") ||
		!strings.HasSuffix(args, "-- guest vm-init") {
		t.Errorf("boot args %q", args)
	}
	noLeftovers(t, run)
}

// TestFirecrackerBootProbeFails has the fake fail each step of the probe
// VM's way to the hello: each is a *FirecrackerError naming the step and
// wrapping the driver's typed error, and leaves no process or socket.
func TestFirecrackerBootProbeFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		fake fake
		step string
		want error
		api  string // the refused request, for an *APIError
	}{
		{name: "exits", fake: fake{mode: "exit"}, step: "launching", want: firecracker.ErrExited},
		{name: "no api socket", fake: fake{mode: "silent"}, step: "launching", want: firecracker.ErrNoSocket},
		{name: "kernel refused", fake: fake{guest: "hello", refuse: "PUT /boot-source"}, step: "configuring and starting", api: "/boot-source"},
		{name: "start refused", fake: fake{guest: "hello", refuse: "PUT /actions"}, step: "configuring and starting", api: "/actions"},
		{name: "no guest on vsock", fake: fake{}, step: "connecting the wire over vsock", want: firecracker.ErrConnectRefused},
		{name: "not a hello", fake: fake{guest: "garbage"}, step: "the init's hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := fakeFirecracker(t, tc.fake)
			run := h.runDir(t)
			vm := fcVM{binary: h.bin, kernel: h.kernel, initramfs: h.initramfs, runDir: run}
			_, err := fcBootProbe(context.Background(), vm, 2*time.Second)
			var fe *FirecrackerError
			if !errors.As(err, &fe) || fe.Step != tc.step {
				t.Fatalf("error %v, want a *FirecrackerError at %q", err, tc.step)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want it to wrap %v", err, tc.want)
			}
			var ae *firecracker.APIError
			if tc.api != "" && (!errors.As(err, &ae) || ae.Path != tc.api || ae.FaultMessage != fctest.RefusedFault) {
				t.Errorf("error %v, want the fake's refusal of %s", err, tc.api)
			}
			for _, c := range h.calls(t) {
				if c.Violation {
					t.Errorf("violation: %s %s: %s", c.Method, c.Path, c.Fault)
				}
			}
			noLeftovers(t, run)
		})
	}
}

// TestChooseVMM: the setting, the binary and the Firecracker probe VM
// decide the VMM; trials fall back to QEMU on auto and refuse on
// firecracker named outright.
func TestChooseVMM(t *testing.T) {
	for _, tc := range []struct {
		name, setting string
		fake          *fake // nil: no firecracker binary
		probe         bool
		vmm           string // "": an error
		why           string
		unavailable   bool // the error is *IsolationUnavailableError
	}{
		{name: "qemu named", setting: "qemu", fake: &fake{guest: "hello"}, probe: true, vmm: VMMQEMU, why: VMMEnv},
		{name: "no binary", setting: "", probe: true, vmm: VMMQEMU, why: "firecracker not used: no firecracker binary"},
		{name: "no binary named", setting: "firecracker", probe: true, unavailable: true},
		{name: "usable", setting: "auto", fake: &fake{guest: "hello"}, probe: true, vmm: VMMFirecracker, why: "a probe VM booted with KVM"},
		{name: "usable named", setting: "firecracker", fake: &fake{guest: "hello"}, probe: true, vmm: VMMFirecracker, why: "a probe VM booted"},
		{name: "probe fails", setting: "auto", fake: &fake{}, probe: true, vmm: VMMQEMU, why: "KVM does not boot a VM: firecracker VM: connecting the wire over vsock"},
		{name: "probe fails named", setting: "firecracker", fake: &fake{}, probe: true, unavailable: true},
		{name: "not probed", setting: "auto", fake: &fake{guest: "hello"}, vmm: VMMQEMU, why: "not probed yet"},
		{name: "bad setting", setting: "kvmtool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Rung{Firecracker: "/nonexistent/firecracker"}
			t.Setenv(VMMEnv, tc.setting)
			var h fcHost
			m := &machine{kernel: &Kernel{Digest: "test-" + t.Name()}}
			if tc.fake != nil {
				h = fakeFirecracker(t, *tc.fake)
				r.Firecracker = h.bin
				m.kernel.Vmlinux, m.initramfs = h.kernel, h.initramfs
				stamp := bootstamp.Path(probeDir, h.bin, "firecracker", m.kernel.Digest, filepath.Base(m.initramfs))
				t.Cleanup(func() { os.Remove(stamp) })
			}
			err := r.chooseVMM(context.Background(), m, tc.probe)
			if tc.vmm == "" {
				var ue *dryexec.IsolationUnavailableError
				if tc.unavailable && !errors.As(err, &ue) {
					t.Fatalf("error %v, want the rung unavailable", err)
				}
				if !tc.unavailable && !errors.Is(err, ErrBadVMM) {
					t.Fatalf("error %v, want ErrBadVMM", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.vmm.name != tc.vmm || !strings.Contains(m.vmm.why, tc.why) {
				t.Fatalf("vmm %+v, want %s saying %q", m.vmm, tc.vmm, tc.why)
			}
			if !tc.probe && tc.fake != nil && len(h.calls(t)) != 0 {
				t.Errorf("unprobed, yet firecracker answered %d calls", len(h.calls(t)))
			}
		})
	}
}

// TestChooseVMMRemembers: a probe's answer is kept until the host's next
// boot, so that doctor (which does not probe) and the next call see it.
func TestChooseVMMRemembers(t *testing.T) {
	h := fakeFirecracker(t, fake{guest: "hello"})
	t.Setenv(VMMEnv, "")
	r := &Rung{Firecracker: h.bin}
	m := &machine{kernel: &Kernel{Vmlinux: h.kernel, Digest: "test-" + t.Name()}, initramfs: h.initramfs}
	stamp := bootstamp.Path(probeDir, h.bin, "firecracker", m.kernel.Digest, filepath.Base(m.initramfs))
	if stamp == "" {
		t.Skip("no boot stamps here")
	}
	t.Cleanup(func() { os.Remove(stamp) })
	if err := r.chooseVMM(context.Background(), m, true); err != nil || m.vmm.name != VMMFirecracker {
		t.Fatalf("probe: %+v %v", m.vmm, err)
	}
	n := len(h.calls(t))
	m.vmm = vmmChoice{}
	if err := r.chooseVMM(context.Background(), m, false); err != nil || m.vmm.name != VMMFirecracker {
		t.Fatalf("remembered: %+v %v", m.vmm, err)
	}
	if len(h.calls(t)) != n {
		t.Errorf("the remembered answer probed again")
	}
}

// TestVMMThisHost: this host has no firecracker (and KVM does not boot a
// VM here): the rung runs QEMU, and doctor and the delta say why.
func TestVMMThisHost(t *testing.T) {
	if d := firecracker.Detect(context.Background(), "", nil); d.Binary != "" {
		t.Skipf("this host has a firecracker (%s)", d.Binary)
	}
	t.Setenv(VMMEnv, "")
	r := testRung(t)
	notes := r.Notes()
	if len(notes) == 0 || !strings.HasPrefix(notes[0], "vmm: qemu (firecracker not used: no firecracker binary") {
		t.Errorf("doctor's notes %q do not say why QEMU", notes)
	}
	d := runTrial(t, r, t.TempDir(), dryexec.TrialSpec{}, "true")
	w := strings.Join(d.Warnings, "\n")
	if !strings.Contains(w, "accel=") || !strings.Contains(w, "vmm qemu: firecracker not used: no firecracker binary") {
		t.Errorf("the delta does not say which VMM ran and why: %q", d.Warnings)
	}
}

// TestRungOnFakeFirecracker drives the rung itself with the fake as its
// firecracker (a guest that greets over the vsock): Boot goes through
// Firecracker; a trial on the host's view runs on QEMU, with firecracker
// named or auto, and its delta says why.
func TestRungOnFakeFirecracker(t *testing.T) {
	r := testRung(t)
	h := fakeFirecracker(t, fake{guest: "hello"})
	m, err := r.resolveQEMU(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(bootstamp.Path(probeDir, h.bin, "firecracker", m.kernel.Digest, filepath.Base(m.initramfs)))
	})
	r.Firecracker = h.bin
	t.Setenv(VMMEnv, "auto")
	res, err := r.Boot(context.Background())
	if err != nil || res.VMM != VMMFirecracker {
		t.Fatalf("Boot: %+v %v, want a boot through firecracker", res, err)
	}
	if got := routes(h.calls(t)); len(got) < 2 || got[len(got)-1] != "PUT /actions" {
		t.Errorf("firecracker's calls %q", got)
	}
	if notes := r.Notes(); len(notes) == 0 || !strings.HasPrefix(notes[0], "vmm: firecracker (firecracker at "+h.bin) {
		t.Errorf("doctor's notes %q", notes)
	}
	// The choice is remembered; the trial's children are not to be fakes.
	t.Setenv(fakeFirecrackerEnv, "")
	t.Setenv(VMMEnv, "firecracker")
	for _, setting := range []string{"firecracker", "auto"} {
		t.Setenv(VMMEnv, setting)
		d := runTrial(t, r, t.TempDir(), dryexec.TrialSpec{}, "true")
		if w := strings.Join(d.Warnings, "\n"); !strings.Contains(w, "vmm qemu: firecracker chosen (") ||
			!strings.Contains(w, "but trials on the host's view run on QEMU") {
			t.Errorf("%s: the delta does not say why QEMU ran: %q", setting, d.Warnings)
		}
	}
}

// routes lists the calls as "METHOD PATH".
func routes(calls []fctest.Call) []string {
	var r []string
	for _, c := range calls {
		r = append(r, c.Method+" "+c.Path)
	}
	return r
}
