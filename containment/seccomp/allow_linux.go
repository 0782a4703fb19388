package seccomp

import (
	"fmt"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Allowed is one call of an allow list.
type Allowed struct {
	Nr int // the native architecture's number (a unix.SYS_* constant)
	// Arg0Clear allows the call only when none of these bits of its first
	// argument are set (clone's namespace flags); other values get the
	// list's refusal.
	Arg0Clear uint32
	// Errno, when not zero, answers the call with it rather than allowing
	// it (clone3 with ENOSYS, so that libc falls back to clone, whose flags
	// the filter can read).
	Errno unix.Errno
}

// AllowList compiles an allow list for the native architecture: the calls
// listed are allowed (or answered as their Allowed says), every other call
// (a foreign architecture's included) fails with refuse. It is the filter of
// a process that does one job and needs few calls (netsim's role process),
// where Profile is a deny list for arbitrary commands.
func AllowList(calls []Allowed, refuse unix.Errno) ([]unix.SockFilter, error) {
	if nativeArch == 0 {
		return nil, fmt.Errorf("seccomp: no filter for this architecture")
	}
	byNr := map[int]Allowed{}
	var nrs []int
	for _, c := range calls {
		if c.Nr < 0 || c.Nr > maxKnown {
			return nil, fmt.Errorf("seccomp: call number %d", c.Nr)
		}
		if _, dup := byNr[c.Nr]; dup {
			return nil, fmt.Errorf("seccomp: call %d listed twice", c.Nr)
		}
		byNr[c.Nr] = c
		nrs = append(nrs, c.Nr)
	}
	sort.Ints(nrs)
	var prog []insn
	emit := func(i insn) { prog = append(prog, i) }
	emit(ld(offArch))
	emit(jmp(unix.BPF_JEQ, nativeArch, "", "refuse"))
	emit(ld(offNr))
	if x32Bit != 0 {
		emit(jmp(unix.BPF_JGE, x32Bit, "refuse", ""))
	}
	// One compare per call: the list is short (≈ 60), well within the
	// 255-instruction reach of a classic BPF jump.
	for _, nr := range nrs {
		target := "allow"
		if c := byNr[nr]; c.Arg0Clear != 0 || c.Errno != 0 {
			target = fmt.Sprintf("c%d", nr)
		}
		emit(jmp(unix.BPF_JEQ, uint32(nr), target, ""))
	}
	emit(ret(unix.SECCOMP_RET_ERRNO | uint32(refuse)).at("refuse"))
	emit(ret(unix.SECCOMP_RET_ALLOW).at("allow"))
	for _, nr := range nrs {
		c := byNr[nr]
		label := fmt.Sprintf("c%d", nr)
		switch {
		case c.Errno != 0:
			emit(ret(unix.SECCOMP_RET_ERRNO | uint32(c.Errno)).at(label))
		case c.Arg0Clear != 0:
			emit(ld(offArgs).at(label))
			emit(jmp(unix.BPF_JSET, c.Arg0Clear, "refuse_arg", "allow_arg"))
		}
	}
	emit(ret(unix.SECCOMP_RET_ERRNO | uint32(refuse)).at("refuse_arg"))
	emit(ret(unix.SECCOMP_RET_ALLOW).at("allow_arg"))
	return assemble(prog)
}

// InstallAllThreads sets no_new_privs and installs prog on every thread of
// the process (SECCOMP_FILTER_FLAG_TSYNC), for a process that confines
// itself as a whole: a Go program's work runs on whichever thread the
// scheduler picks, and threads created later inherit the filter from the
// thread that creates them.
func InstallAllThreads(prog []unix.SockFilter) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: no_new_privs: %w", err)
	}
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fp)))
	if errno != 0 {
		return fmt.Errorf("seccomp: installing the filter on every thread: %w", errno)
	}
	if r != 0 {
		// TSYNC returns the id of a thread it could not synchronise.
		return fmt.Errorf("seccomp: thread %d could not take the filter", r)
	}
	return nil
}
