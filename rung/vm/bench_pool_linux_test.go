package vm

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/procfs"
	"github.com/dryexec/dryexec/internal/rungbench"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// exitInit is a whole static x86-64 program that calls exit(0): the init of
// the bare boot, which measures QEMU and the kernel alone. Its ELF header,
// one loadable segment, then `mov eax, 60; xor edi, edi; syscall`.
func exitInit() []byte {
	const base, hdr = 0x400000, 64 + 56
	code := []byte{0xb8, 60, 0, 0, 0, 0x31, 0xff, 0x0f, 0x05}
	var b bytes.Buffer
	le := binary.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	for _, v := range []any{uint16(2), uint16(0x3e), uint32(1), uint64(base + hdr), uint64(64), uint64(0), uint32(0),
		uint16(64), uint16(56), uint16(1), uint16(0), uint16(0), uint16(0)} {
		binary.Write(&b, le, v)
	}
	size := uint64(hdr + len(code))
	for _, v := range []any{uint32(1), uint32(5), uint64(0), uint64(base), uint64(base), size, size, uint64(0x1000)} {
		binary.Write(&b, le, v)
	}
	b.Write(code)
	return b.Bytes()
}

// noPorts is a transport with no ports (the bare boot has no wire).
type noPorts struct{}

func (noPorts) Name() string            { return "none" }
func (noPorts) Args(fds []int) []string { return nil }

// bareBoot returns a candidate that boots the same QEMU machine (the same
// flags, accelerator, RAM and kernel, the same kernel command line up to
// init's argv) with an initramfs whose init exits at once; the kernel then
// panics and resets, which ends QEMU. That is the floor of any boot of
// this kernel in this QEMU: what the rung's boot adds on top is its
// initramfs's size, the module loads, the ports and the guest's start.
func bareBoot(b *testing.B, m *machine) rungbench.Candidate {
	dir := b.TempDir()
	var img bytes.Buffer
	c := &cpioWriter{w: &img}
	init := exitInit()
	c.dir("dev")
	c.charDev("dev/console", 0o600, 5, 1)
	c.file("init", 0o755, int64(len(init)), bytes.NewReader(init))
	if err := c.close(); err != nil {
		b.Fatal(err)
	}
	initrd := filepath.Join(dir, "bare.cpio")
	if err := os.WriteFile(initrd, img.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg := vmConfig{qemu: m.qemu, accel: m.accel, kernel: m.kernel.Vmlinux, initramfs: initrd, transport: noPorts{}}
	argv := cfg.argv()
	for i := range argv {
		if argv[i] == "-append" {
			argv[i+1], _, _ = strings.Cut(kernelArgs, " -- ")
		}
	}
	return rungbench.Candidate{Name: "vm_bare_boot", Run: func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("bare boot: %w: %s", err, out.Bytes())
		}
		return nil
	}}
}

// BenchmarkPool times, interleaved in each iteration so that all meet the
// same machine: QEMU's bare boot of the kernel (bareBoot) against the
// rung's boot to its init's hello (the first served wire message); a cold
// vm trial of /bin/true against one in a VM the warm pool booted ahead
// (trial start to the delta; before it, untimed, the pool is waited for
// until it has a VM ready and boots nothing), and the same on ns's pool
// (BenchmarkSessionPool does sessions). At the end, with the pools ready and quiet, the
// host memory of an idle pooled VM (QEMU, which the view guest became, and
// its netsim: RSS and PSS from /proc) against an idle pooled ns sandbox's
// guest (PSS). Medians in ms, memory in MiB, and the ratios:
//
//	go test -run '^$' -bench Pool -benchtime 3x -timeout 60m ./rung/vm
func BenchmarkPool(b *testing.B) {
	// A boot on this loaded host took over a minute while other VMs booted.
	r := &Rung{GuestExe: staticGuest(b), BootTimeout: 5 * time.Minute}
	ctx := context.Background()
	if err := r.Available(ctx); err != nil {
		b.Skip(err)
	}
	ns := &linuxns.Rung{}
	if err := ns.Available(ctx); err != nil {
		b.Skip(err)
	}
	m, err := r.resolve(ctx, true)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	spec := dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"/bin/true"}, Cwd: dir,
		Env: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}}}
	vmPool, err := NewPool(ctx, r, dryexec.PoolOptions{Size: 1, IdleTimeout: -1, Spec: spec})
	if err != nil {
		b.Fatal(err)
	}
	defer vmPool.Close()
	nsPool, err := linuxns.NewPool(ctx, ns, dryexec.PoolOptions{Size: 1, IdleTimeout: -1, Spec: spec})
	if err != nil {
		b.Fatal(err)
	}
	defer nsPool.Close()
	trialStats := func(p dryexec.Pool) func() (int, int) {
		return func() (int, int) { s := p.Stats(); return s.Ready, s.Busy }
	}
	// Before every candidate, untimed, both pools are ready and quiet: a
	// refill's boot never runs beside a timed candidate.
	quiet := func() error {
		for _, p := range []dryexec.Pool{vmPool, nsPool} {
			if err := rungbench.WaitQuiet(trialStats(p))(); err != nil {
				return err
			}
		}
		return nil
	}
	pooledTrial := func(name string, p dryexec.Pool) rungbench.Candidate {
		return rungbench.Candidate{Name: name, Run: func() error {
			d, err := p.Trial(ctx, spec)
			if err == nil && (d.Process.ExitCode != 0 || d.Incomplete) {
				return fmt.Errorf("exit %d incomplete %v", d.Process.ExitCode, d.Incomplete)
			}
			return err
		}}
	}
	cold := rungbench.Trial(b, r)
	cold.Name = "vm_cold"
	nsCold := rungbench.Trial(b, ns)
	nsCold.Name = "ns_cold"
	cands := []rungbench.Candidate{
		bareBoot(b, m),
		{Name: "vm_boot", Run: func() error { _, err := r.Boot(ctx); return err }},
		cold,
		pooledTrial("vm_pool_hit", vmPool),
		nsCold,
		pooledTrial("ns_pool_hit", nsPool),
	}
	for i := range cands {
		cands[i].Prep = quiet
	}
	med := rungbench.Interleave(b, cands)
	b.ReportMetric(med[1]/med[0], "vm_boot/bare")
	b.ReportMetric(med[2]/med[3], "vm_cold/vm_pool")
	b.ReportMetric(med[3]/med[5], "vm_pool/ns_pool")

	// What an idle pooled sandbox holds on the host.
	if err := quiet(); err != nil {
		b.Fatal(err)
	}
	var rss, pss int64
	for _, pid := range vmPool.readyPids() {
		r, p := procfs.Rollup(pid)
		rss, pss = rss+r, pss+p
	}
	nsPSS := nsPool.Stats().IdlePSSBytes
	const mib = 1 << 20
	b.ReportMetric(float64(rss)/mib, "vm_idle_rss-MiB")
	b.ReportMetric(float64(pss)/mib, "vm_idle_pss-MiB")
	b.ReportMetric(float64(nsPSS)/mib, "ns_idle_pss-MiB")
	if nsPSS > 0 {
		b.ReportMetric(float64(pss)/float64(nsPSS), "vm/ns_idle_pss")
	}
}
