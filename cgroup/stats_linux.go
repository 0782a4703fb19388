package cgroup

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/procfs"
)

// Stats reads the group's counters: OOM kills and refused forks (v1: summed
// over the group's tree, v2: hierarchical already) and peak memory. After
// Remove it returns zeros.
//
// It runs after every trial, on the critical path of a warm one, and on a
// nested VM every path lookup, open and directory listing costs tens of µs:
// so the first call opens the files once and later ones only pread them at
// offset 0 (seq_file regenerates a cgroup file's content when read from 0),
// and v1's walk of the tree is skipped while the group's directories show no
// group below run (see treeIsRun).
func (g *Group) Stats() Stats {
	f := &g.stats
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return Stats{}
	}
	if !f.opened {
		f.open(g)
	}
	var s Stats
	for i := range f.counters {
		c := &f.counters[i]
		var v int64
		switch {
		case !c.tree:
			v = f.read(c.fd, c.key)
		case treeIsRun(c.dirFD, c.runDirFD):
			v = f.read(c.fd, c.key) + f.read(c.runFD, c.key)
		default:
			v = sumTree(c.dir, c.file, c.key)
		}
		switch c.kind {
		case oomKills:
			s.OOMKills += v
		case pidsRefused:
			s.PidsRefused += v
		case peakMem:
			s.PeakMemBytes = max(s.PeakMemBytes, v)
		}
	}
	return s
}

// statFiles holds what Stats reads, open from its first call until Remove.
// Held fds do not keep a group from being removed (kernfs cuts them off at
// rmdir), but Remove closes them first.
type statFiles struct {
	mu       sync.Mutex // guards the fields below (Stats and Remove may race)
	opened   bool
	closed   bool
	counters []counter
	fds      []int  // every fd opened, to close
	buf      []byte // read buffer (cgroup counter files are a few lines)
}

type statKind int

const (
	oomKills statKind = iota
	pidsRefused
	peakMem
)

// counter is one value Stats reads: key's value (or a file's single number
// when key is "") in file of a group dir.
type counter struct {
	kind statKind
	key  string
	fd   int // dir/file, -1 if it could not be opened (absent: reads 0)
	// tree: a v1 event, counted only in the group where it happened (the
	// victim's for an OOM kill, the limited or forking one for a refused
	// fork), so summed over dir and the groups beneath it.
	tree            bool
	dir, file       string // for the walk when there are groups besides run
	runFD           int    // dir/run/file
	dirFD, runDirFD int    // dir and dir/run, whose link counts say whether there are
}

// open opens the files of every hierarchy of g's. A file that cannot be
// opened counts as 0, as a failed read did before (a v2 tree with none of
// our controllers has no memory.events).
func (f *statFiles) open(g *Group) {
	f.opened = true
	f.buf = make([]byte, 512)
	openFD := func(p string, flags int) int {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|flags, 0)
		if err != nil {
			return -1
		}
		f.fds = append(f.fds, fd)
		return fd
	}
	add := func(kind statKind, dir, file, key string) {
		if fd := openFD(filepath.Join(dir, file), 0); fd >= 0 {
			f.counters = append(f.counters, counter{kind: kind, key: key, fd: fd, runFD: -1, dirFD: -1, runDirFD: -1})
		}
	}
	for i, h := range g.m.hier {
		if i >= len(g.dirs) || i >= len(g.runs) {
			break
		}
		d, run := g.dirs[i], g.runs[i]
		if h.v2 {
			add(oomKills, d, "memory.events", "oom_kill")
			add(pidsRefused, d, "pids.events", "max")
			add(peakMem, d, "memory.peak", "")
			continue
		}
		dirFD, runDirFD := -1, -1
		addTree := func(kind statKind, file, key string) {
			if dirFD < 0 {
				dirFD = openFD(d, unix.O_DIRECTORY)
				runDirFD = openFD(run, unix.O_DIRECTORY)
			}
			f.counters = append(f.counters, counter{kind: kind, key: key, tree: true, dir: d, file: file,
				fd: openFD(filepath.Join(d, file), 0), runFD: openFD(filepath.Join(run, file), 0),
				dirFD: dirFD, runDirFD: runDirFD})
		}
		for _, c := range h.ctrls {
			switch c {
			case "memory":
				addTree(oomKills, "memory.oom_control", "oom_kill")
				add(peakMem, d, "memory.max_usage_in_bytes", "") // usage is hierarchical
			case "pids":
				addTree(pidsRefused, "pids.events", "max")
			}
		}
	}
}

// close closes the fds; Stats reads nothing from then on.
func (f *statFiles) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fd := range f.fds {
		unix.Close(fd)
	}
	f.fds, f.counters, f.closed = nil, nil, true
}

// read returns key's value in the file open at fd (0 if fd < 0 or the read
// fails, as for a file that cannot be read).
func (f *statFiles) read(fd int, key string) int64 {
	if fd < 0 {
		return 0
	}
	for {
		n, err := unix.Pread(fd, f.buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0
		}
		// seq_file fills a read as far as it can: a short one is the whole
		// file. A full one may not be: read again with room to spare.
		if n == len(f.buf) && n < maxStatFile {
			f.buf = make([]byte, 2*len(f.buf))
			continue
		}
		return parseValue(f.buf[:n], key)
	}
}

// maxStatFile bounds the read buffer: counter files are a few short lines.
const maxStatFile = 64 << 10

// treeIsRun says whether the group dir has no group beneath it but run, and
// run none at all: on kernfs a directory's link count is 2 plus its number
// of subdirectories (kernfs_refresh_inode, refreshed by every fstat), and a
// cgroup's only subdirectories are its child groups. A sandbox cannot
// normally make groups, but one that did, or a missing fd, falls back to the
// walk.
func treeIsRun(dirFD, runDirFD int) bool {
	if dirFD < 0 || runDirFD < 0 {
		return false
	}
	var st unix.Stat_t
	if unix.Fstat(dirFD, &st) != nil || st.Nlink != 3 {
		return false
	}
	return unix.Fstat(runDirFD, &st) == nil && st.Nlink == 2
}

// sumTree adds key's value in file over dir and the groups beneath it (a
// few levels: run, and what a sandbox might have made below it).
func sumTree(dir, file, key string) int64 {
	n := keyed(filepath.Join(dir, file), key)
	var walk func(d string, depth int)
	walk = func(d string, depth int) {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if e.IsDir() && depth < 4 {
				p := filepath.Join(d, e.Name())
				n += keyed(filepath.Join(p, file), key)
				walk(p, depth+1)
			}
		}
	}
	walk(dir, 0)
	return n
}

// keyed reads file and returns key's value in it (see parseValue; 0 if the
// file cannot be read).
func keyed(file, key string) int64 {
	b, _ := os.ReadFile(file)
	return parseValue(b, key)
}

// parseValue returns the value of the first "key value" line of b, or with
// key "" the number b holds; 0 if absent or not a number. It allocates
// nothing.
func parseValue(b []byte, key string) int64 {
	if key == "" {
		return atoi(b)
	}
	v, _ := procfs.Field(b, key)
	return v
}

// atoi parses b as a decimal number between spaces; anything else is 0.
func atoi(b []byte) int64 {
	// The conversion does not allocate: ParseInt does not keep its argument.
	n, _ := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	return n
}
