package wire

import (
	"encoding/binary"
	"fmt"
	"strings"
	"syscall"
)

// The command stub's request. A trial's command process is started before
// the command is known (guest.cmdStub): a tiny program waiting on fd StubFD
// of the guest (its own fd 3) for one request, which the host writes
// itself, so that the command starts without waiting for the guest to be
// scheduled. Layout, native byte order:
//
//	StubHeader | NUL-terminated strings: program, directory, argv..., env...
//
// The stub execs program, searching the PATH in env as a shell does when
// program has no slash. The request's end (EOF) is the stub's cue that no
// command comes.
type StubHeader struct {
	Magic, Flags, Argc, Envc uint32
	Size                     uint64 // bytes of strings that follow
}

// StubMagic opens every request ("stub" in little-endian order).
const StubMagic = 0x62757473

// StubFlagStdin: the command reads the stub's fd 5 (the trial's stdin
// pipe) instead of /dev/null.
const StubFlagStdin = 1

// StubMaxSize bounds a request's strings; the kernel's own bound on argv
// and env together is far lower.
const StubMaxSize = 1 << 30

// StubRequest encodes r's command for the stub: program argv[0], r's
// directory, argv and env. A string with a NUL byte cannot be passed to
// execve: EINVAL, as Go's own exec says.
func StubRequest(r *TrialRun) ([]byte, error) {
	if len(r.Argv) == 0 || r.Argv[0] == "" {
		return nil, fmt.Errorf("%w: no command", syscall.EINVAL)
	}
	h := StubHeader{Magic: StubMagic, Argc: uint32(len(r.Argv)), Envc: uint32(len(r.Env))}
	if r.Stdin {
		h.Flags |= StubFlagStdin
	}
	strs := make([]string, 0, 2+len(r.Argv)+len(r.Env))
	strs = append(append(append(strs, r.Argv[0], r.Cwd), r.Argv...), r.Env...)
	for _, s := range strs {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, syscall.EINVAL
		}
		h.Size += uint64(len(s)) + 1
	}
	if h.Size > StubMaxSize {
		return nil, syscall.E2BIG
	}
	b := make([]byte, 0, binary.Size(h)+int(h.Size))
	b, _ = binary.Append(b, binary.NativeEndian, &h)
	for _, s := range strs {
		b = append(append(b, s...), 0)
	}
	return b, nil
}
