package seccomp

import (
	"fmt"
	"sort"

	"golang.org/x/sys/unix"
)

// Offsets in struct seccomp_data. Arguments are read by their low 32 bits,
// which come first on both supported (little-endian) architectures.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// insn is one BPF instruction whose jump targets are labels ("" is the next
// instruction), resolved by assemble.
type insn struct {
	code   uint16
	k      uint32
	jt, jf string
	label  string // this instruction's own label, if any
}

// The three instructions both compilers (Program's deny list, AllowList's
// allow list) are written in.

// ld loads the 32-bit word of struct seccomp_data at off.
func ld(off uint32) insn { return insn{code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, k: off} }

// ret ends the filter with verdict k.
func ret(k uint32) insn { return insn{code: unix.BPF_RET | unix.BPF_K, k: k} }

// jmp compares the accumulator with k by op and jumps to jt or jf.
func jmp(op uint16, k uint32, jt, jf string) insn {
	return insn{code: unix.BPF_JMP | op | unix.BPF_K, k: k, jt: jt, jf: jf}
}

// at returns i labelled l, the target of jumps to l.
func (i insn) at(l string) insn {
	i.label = l
	return i
}

// Program compiles p for the native architecture. With notify, refused calls
// return SECCOMP_RET_USER_NOTIF (a supervisor answers and reports them);
// without, they return their errno directly (nothing is reported: for tests
// and for kernels without user notification).
//
// Layout: check the architecture (a foreign one is refused), refuse x32 call
// numbers on amd64, then compare the call number against every refused call
// (one jeq each; unconditional rules jump straight to the refusal,
// conditional ones to their argument checks), refuse numbers above maxKnown,
// allow the rest. A call that is not refused runs len(refused calls)+5
// instructions, which the kernel's JIT turns into as many compares.
func (p *Profile) Program(notify bool) ([]unix.SockFilter, error) {
	t := table()
	if nativeArch == 0 || len(t) == 0 {
		return nil, fmt.Errorf("seccomp: no profile for this architecture")
	}
	refuse := func(errno unix.Errno) uint32 {
		if notify {
			return unix.SECCOMP_RET_USER_NOTIF
		}
		return unix.SECCOMP_RET_ERRNO | uint32(errno)
	}
	// Group the rules by call number, keeping their order.
	groups := map[int][]Rule{}
	for _, r := range p.Rules {
		nr, ok := t[r.Name]
		if !ok {
			continue
		}
		groups[nr] = append(groups[nr], r)
	}
	nrs := make([]int, 0, len(groups))
	for nr := range groups {
		nrs = append(nrs, nr)
	}
	sort.Ints(nrs)

	var prog []insn
	emit := func(i insn) { prog = append(prog, i) }

	emit(ld(offArch))
	emit(jmp(unix.BPF_JEQ, nativeArch, "native", ""))
	emit(ret(refuse(unix.ENOSYS)))
	emit(ld(offNr).at("native"))
	if x32Bit != 0 {
		emit(jmp(unix.BPF_JGE, x32Bit, "foreign", ""))
	}
	handled := false
	for _, nr := range nrs {
		rs := groups[nr]
		target := fmt.Sprintf("g%d", nr)
		for _, r := range rs {
			if r.Handled && len(rs) > 1 {
				return nil, fmt.Errorf("seccomp: %s is handled and has other rules", r.Name)
			}
		}
		switch {
		case rs[0].Handled:
			target, handled = "handle", true
		case len(rs) == 1 && len(rs[0].Conds) == 0 && !rs[0].Silent:
			target = "refuse_" + rs[0].Errno.Error()
		}
		emit(jmp(unix.BPF_JEQ, uint32(nr), target, ""))
	}
	emit(jmp(unix.BPF_JGT, maxKnown, "foreign", "allow"))
	emit(ret(unix.SECCOMP_RET_ALLOW).at("allow"))
	emit(ret(refuse(unix.ENOSYS)).at("foreign"))
	if handled {
		// The supervisor performs these calls; without one they run.
		h := ret(unix.SECCOMP_RET_ALLOW)
		if notify {
			h = ret(unix.SECCOMP_RET_USER_NOTIF)
		}
		h.label = "handle"
		emit(h)
	}
	// One shared refusal per errno used by unconditional rules.
	errnos := map[unix.Errno]bool{}
	for _, nr := range nrs {
		if rs := groups[nr]; len(rs) == 1 && len(rs[0].Conds) == 0 && !rs[0].Silent && !rs[0].Handled {
			errnos[rs[0].Errno] = true
		}
	}
	var es []int
	for e := range errnos {
		es = append(es, int(e))
	}
	sort.Ints(es)
	for _, e := range es {
		emit(ret(refuse(unix.Errno(e))).at("refuse_" + unix.Errno(e).Error()))
	}
	for _, nr := range nrs {
		rs := groups[nr]
		if len(rs) == 1 && len(rs[0].Conds) == 0 && !rs[0].Silent || rs[0].Handled {
			continue
		}
		for j, r := range rs {
			start := len(prog)
			fail := fmt.Sprintf("g%dr%d", nr, j+1)
			for _, c := range r.Conds {
				if c.Arg < 0 || c.Arg > 5 {
					return nil, fmt.Errorf("seccomp: rule for %s: argument %d", r.Name, c.Arg)
				}
				emit(ld(offArgs + 8*uint32(c.Arg)))
				switch c.Op {
				case OpEq:
					emit(jmp(unix.BPF_JEQ, c.Value, "", fail))
				case OpMaskedEq:
					emit(insn{code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, k: c.Mask})
					emit(jmp(unix.BPF_JEQ, c.Value, "", fail))
				case OpAnyBits:
					emit(jmp(unix.BPF_JSET, c.Mask, "", fail))
				case OpNotIn:
					for _, v := range c.Values {
						emit(jmp(unix.BPF_JEQ, v, fail, ""))
					}
				default:
					return nil, fmt.Errorf("seccomp: rule for %s: unknown op %d", r.Name, c.Op)
				}
			}
			if r.Silent {
				emit(ret(unix.SECCOMP_RET_ERRNO | uint32(r.Errno)))
			} else {
				emit(ret(refuse(r.Errno)))
			}
			if j == 0 {
				prog[start].label = fmt.Sprintf("g%d", nr)
			} else {
				prog[start].label = fmt.Sprintf("g%dr%d", nr, j)
			}
		}
		emit(ret(unix.SECCOMP_RET_ALLOW).at(fmt.Sprintf("g%dr%d", nr, len(rs))))
	}
	return assemble(prog)
}

// assemble resolves labels into the 8-bit forward offsets classic BPF has.
func assemble(prog []insn) ([]unix.SockFilter, error) {
	if len(prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: program of %d instructions", len(prog))
	}
	at := map[string]int{}
	for i, in := range prog {
		if in.label != "" {
			if _, dup := at[in.label]; dup {
				return nil, fmt.Errorf("seccomp: label %s twice", in.label)
			}
			at[in.label] = i
		}
	}
	off := func(i int, l string) (uint8, error) {
		if l == "" {
			return 0, nil
		}
		t, ok := at[l]
		if !ok {
			return 0, fmt.Errorf("seccomp: no label %s", l)
		}
		d := t - i - 1
		if d < 0 || d > 255 {
			return 0, fmt.Errorf("seccomp: jump to %s is %d instructions", l, d)
		}
		return uint8(d), nil
	}
	out := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		jt, err := off(i, in.jt)
		if err != nil {
			return nil, err
		}
		jf, err := off(i, in.jf)
		if err != nil {
			return nil, err
		}
		out[i] = unix.SockFilter{Code: in.code, Jt: jt, Jf: jf, K: in.k}
	}
	return out, nil
}

// Known reports whether name is a call the profile compiler can filter on
// this architecture. Program leaves out rules naming any other (mknod,
// rename and link do not exist on arm64), so a profile's tests check their
// names with it: a call missing from the table is a rule that silently
// does nothing.
func Known(name string) bool {
	_, ok := table()[name]
	return ok
}
