package guest

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/wire"
)

// FIFOs inside gVisor. gVisor's gofer (and its directfs) make regular files
// only: mknod of a FIFO on a gofer mount gets EPERM from them, and gVisor's
// kernel then keeps the FIFO in its own memory, where the command uses it as
// it would natively, but the upper dirs the host walks never get it. Nothing
// on the host side can see it, and no flag of runsc changes that (its
// --host-fifo only opens FIFOs the host already has). So the trial guest,
// which does see it, finds each FIFO the command made and reports it
// (TrialDone.Nodes) with its final mode, owner and times; the host makes it
// in the upper dirs before the walk. Where they are comes from runsc's own
// strace of the calls that make or move one (wire.GVisorTracedCalls), logged
// to the memfd at wire.GVisorLogFD: gVisor has no seccomp user notification,
// no fanotify, and a walk of the whole view for FIFOs would read every
// directory of the host.

// straceParsers are the patterns that read runsc's strace. They are
// compiled where a log is read (once per gvisor trial), not at package
// init: every guest of every rung would otherwise compile them as it
// starts (≈ 0.4 ms and 400 allocations of each cold trial's start-up).
type straceParsers struct {
	// exit matches a successful exit line of runsc's strace: the call's
	// name and its arguments as strace printed them. A task outside the
	// sandbox's root pid namespace (the command's, commandPIDNS) is
	// prefixed "[ROOTPID(PID):ROOTTID(TID)]", else "[PID:TID]".
	exit *regexp.Regexp
	// How strace prints the arguments (gVisor's pkg/sentry/strace): a dir
	// FD as "AT_FDCWD <cwd>" or "<fd> <path>", a path as "<address>
	// <string>", a mode as "S_IFIFO|0o644", renameat's new dir FD as a
	// number only.
	mknodat, mknod, rename, renameat *regexp.Regexp
}

func newStraceParsers() *straceParsers {
	return &straceParsers{
		exit:     regexp.MustCompile(`\] \[ *\d+(?:\( *\d+\))?: *\d+(?:\( *\d+\))?\] .* X (mknodat|mknod|renameat2|renameat|rename)\((.*)\) = 0 \(0x0\) \([^()]*\)$`),
		mknodat:  regexp.MustCompile(`^(?:AT_FDCWD|0x[0-9a-f]+) (.*), 0x[0-9a-f]+ (.*), S_IFIFO\|0o[0-7]+, 0x[0-9a-f]+$`),
		mknod:    regexp.MustCompile(`^0x[0-9a-f]+ (.*), S_IFIFO\|0o[0-7]+, 0x[0-9a-f]+$`),
		rename:   regexp.MustCompile(`^0x[0-9a-f]+ (.*), 0x[0-9a-f]+ (.*)$`),
		renameat: regexp.MustCompile(`^(AT_FDCWD|0x[0-9a-f]+) (.*), 0x[0-9a-f]+ (.*), (0x[0-9a-f]+), 0x[0-9a-f]+ (.*?)(?:, (0x[0-9a-f]+))?$`),
	}
}

const atFDCWDNumber = "0xffffff9c" // AT_FDCWD as strace prints a Hex argument (32 bits)

// sandboxFIFOs reads runsc's strace at fd (wire.GVisorLogFD), follows each
// FIFO the command made through the renames after it, and returns those
// still there, as this kernel shows them, and what could not be followed.
// No log (fd not open): nothing.
func sandboxFIFOs(fd int) (nodes []wire.SandboxNode, lost []string) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return nil, nil
	}
	f := os.NewFile(uintptr(fd), "runsc-log")
	defer f.Close()
	// runsc appends to it: read it whole from the start.
	b := make([]byte, st.Size)
	if n, err := f.ReadAt(b, 0); err != nil && n < len(b) {
		return nil, []string{fmt.Sprintf("runsc's log of the FIFOs the command made could not be read (%v)", err)}
	}
	fifos, unplaced, lost := followFIFOs(string(b))
	seen := map[string]bool{}
	for _, where := range fifos {
		found := false
		for _, p := range where {
			n, err := statNode(p)
			if err != nil || n.Mode&unix.S_IFMT != unix.S_IFIFO {
				continue
			}
			found = true
			if p := string(n.Path); !seen[p] {
				seen[p] = true
				nodes = append(nodes, n)
			}
		}
		if !found && unplaced {
			// Removed, or moved by a rename the log could not place:
			// which one is not known, so say so.
			lost = append(lost, fmt.Sprintf("the FIFO the command made at %q is not there at its end, and a rename runsc's log does not place could have moved it", where[0]))
		}
	}
	return nodes, lost
}

// followFIFOs returns, from runsc's strace log, each FIFO the command made:
// the paths where it may be after the renames that followed, its first
// path first. strace gives a rename(2) of relative paths without its
// working directory: a FIFO it could have moved (one whose path holds the
// old path's names) may then be at either place, and both are kept (the
// trial guest reports those that hold a FIFO at the end). unplaced says a
// rename could not be followed at all (renameat's new directory is a
// descriptor number only, or a path climbs with ".."); lost lists FIFOs
// made where the log does not say (a relative mknod(2)).
func followFIFOs(log string) (fifos [][]string, unplaced bool, lost []string) {
	move := func(old, nw string, exchange bool) {
		for i, where := range fifos {
			fifos[i] = moved(where, old, nw, exchange)
		}
	}
	re := newStraceParsers()
	for _, line := range strings.Split(log, "\n") {
		m := re.exit.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		call, args := m[1], m[2]
		switch call {
		case "mknodat", "mknod":
			var p string
			if a := re.mknodat.FindStringSubmatch(args); call == "mknodat" && a != nil {
				p = joinAt(a[1], a[2])
			} else if a := re.mknod.FindStringSubmatch(args); call == "mknod" && a != nil {
				if !path.IsAbs(a[1]) {
					lost = append(lost, fmt.Sprintf("the command made a FIFO with mknod(2) at the relative path %q, which runsc's log does not place", a[1]))
					continue
				}
				p = path.Clean(a[1])
			} else {
				continue
			}
			fifos = append(fifos, []string{p})
		case "rename":
			a := re.rename.FindStringSubmatch(args)
			switch {
			case a == nil:
				unplaced = true
			case path.IsAbs(a[1]) && path.IsAbs(a[2]):
				move(path.Clean(a[1]), path.Clean(a[2]), false)
			case climbs(a[1]) || climbs(a[2]):
				unplaced = true
			default:
				for i, where := range fifos {
					fifos[i] = movedRelative(where, a[1], a[2])
				}
			}
		case "renameat", "renameat2":
			a := re.renameat.FindStringSubmatch(args)
			if a == nil {
				unplaced = true
				continue
			}
			oldDir, oldName, newFD, newName := a[2], a[3], a[4], a[5]
			var nw string
			switch {
			case path.IsAbs(newName):
				nw = path.Clean(newName)
			case newFD == atFDCWDNumber && a[1] == "AT_FDCWD", newFD == a[1]:
				// The same directory descriptor (or the working
				// directory both times): old's directory.
				nw = joinAt(oldDir, newName)
			default:
				unplaced = true
				continue
			}
			exchange := call == "renameat2" && a[6] != "" && parseHex(a[6])&unix.RENAME_EXCHANGE != 0
			move(joinAt(oldDir, oldName), nw, exchange)
		}
	}
	return fifos, unplaced, lost
}

func joinAt(dir, name string) string {
	if path.IsAbs(name) {
		return path.Clean(name)
	}
	return path.Join(dir, name)
}

// climbs says whether a relative path has a ".." in it.
func climbs(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "..")
}

// moved applies a rename of old to nw (or their exchange) to every path in
// where at or beneath either.
func moved(where []string, old, nw string, exchange bool) []string {
	for i, f := range where {
		switch {
		case f == old || strings.HasPrefix(f, old+"/"):
			where[i] = nw + f[len(old):]
		case exchange && (f == nw || strings.HasPrefix(f, nw+"/")):
			where[i] = old + f[len(nw):]
		}
	}
	return where
}

// movedRelative adds to where each place a rename of the relative path old
// to nw, from a working directory the log does not give, could have moved
// one of its paths to: wherever the path holds old's names, the directory
// before them could have been the working directory.
func movedRelative(where []string, old, nw string) []string {
	on := strings.Split(path.Clean(old), "/")
	out := where
	for _, f := range where {
		names := strings.Split(strings.TrimPrefix(f, "/"), "/")
		for j := 0; j+len(on) <= len(names); j++ {
			if !slices.Equal(names[j:j+len(on)], on) {
				continue
			}
			cwd := "/" + strings.Join(names[:j], "/")
			rest := strings.Join(names[j+len(on):], "/")
			out = appendNew(out, path.Join(cwd, nw, rest))
		}
	}
	return out
}

func appendNew(s []string, p string) []string {
	if slices.Contains(s, p) {
		return s
	}
	return append(s, p)
}

func parseHex(s string) uint64 {
	var v uint64
	fmt.Sscanf(s, "0x%x", &v)
	return v
}

// statNode is p as this kernel shows it, with its ancestors, at the path
// p's directory resolves to here: a FIFO made through a link (one the
// command made to a host directory, or the host's own /var/run) is where
// the sandbox put it, in the view, and the host, which follows no link in
// the upper dirs, makes it there.
func statNode(p string) (wire.SandboxNode, error) {
	real, err := filepath.EvalSymlinks(path.Dir(p))
	if err != nil {
		return wire.SandboxNode{}, err
	}
	p = path.Join(real, path.Base(p))
	n, err := lstatNode(p)
	if err != nil {
		return n, err
	}
	dir := "/"
	for _, name := range strings.Split(strings.Trim(path.Dir(p), "/"), "/") {
		if name == "" {
			break
		}
		dir = path.Join(dir, name)
		d, err := lstatNode(dir)
		if err != nil {
			return n, err
		}
		n.Dirs = append(n.Dirs, d)
	}
	return n, nil
}

func lstatNode(p string) (wire.SandboxNode, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return wire.SandboxNode{}, err
	}
	return wire.SandboxNode{Path: []byte(p), Mode: st.Mode, UID: st.Uid, GID: st.Gid,
		AtimeNS: st.Atim.Nano(), MtimeNS: st.Mtim.Nano(), CtimeNS: st.Ctim.Nano()}, nil
}
