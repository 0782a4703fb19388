package viewtrial

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/tail"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/wire"
)

// The host's side of a trial in a sandbox with a kernel of its own (vm,
// gvisor) against a guest that is the sandbox's: on vm, root in the VM can
// replace the guest supervisor and speak the wire itself over the ctrl
// port. These tests drive Converse and Report, exactly the code the vm
// rung runs between the VM's hello and the delta, with a forged guest on a
// socketpair and real upper dirs on disk, without booting a VM.

// hashSink keeps nothing: the sha256 and length are what the delta needs.
type hashSink struct{}

func (hashSink) PutBlob(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// forgedTrial is a Trial whose host dir holds keep.txt, whose upper dir
// (as the sandbox left it) holds a new planted.txt and a changed
// keep.txt, and whose Inner stream is spoken by guest once it has read
// trial.start and trial.run. It returns the trial and the guest's end.
func forgedTrial(t *testing.T) (*Trial, string) {
	t.Helper()
	host, scratch := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "keep.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	up := filepath.Join(scratch, "u", "0")
	if err := os.MkdirAll(up, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]string{"planted.txt": "from the VM\n", "keep.txt": "changed\n"} {
		if err := os.WriteFile(filepath.Join(up, name), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Open(scratch, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	tr := &Trial{
		Spec: dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"true"}, Cwd: host, TimeoutMS: 60000},
			Blobs: hashSink{}, OutputCap: 1 << 16, TrialID: "hostile"},
		Mounts: []wire.MountSpec{{Path: host}}, Uppers: nil, Rung: "vm", What: "the VM",
		Scratch: os.NewFile(uintptr(fd), "scratch"), ScratchFD: fd, Watch: linuxns.NewMaskWatch(),
		Out: tail.New(1 << 16), Errb: tail.New(1 << 16),
	}
	tr.Uppers, err = CheckUppers([]string{host}, tr.Mounts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Release)
	return tr, host
}

// converseWith runs tr's conversation against guest (which gets its raw
// end of the stream after trial.start and trial.run), then the host's
// report, as the vm rung does: Converse's error is the report's cause.
func converseWith(t *testing.T, tr *Trial, guest func(raw *os.File, g *wire.Conn)) (*dryexec.StateDelta, error) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	hostEnd, guestEnd := os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "guest")
	defer hostEnd.Close()
	tr.Inner = wire.NewConn(hostEnd)
	guestDone := make(chan struct{})
	go func() {
		defer close(guestDone)
		defer guestEnd.Close()
		g := wire.NewConn(guestEnd)
		for _, want := range []string{wire.VerbTrialStart, wire.VerbTrialRun} {
			f, err := g.Read()
			if err != nil || f.Verb != want {
				t.Errorf("guest: read %v %v, want %s", f, err, want)
				return
			}
		}
		guest(guestEnd, g)
	}()
	cerr := tr.Converse(nil, func([]byte) error { return nil }, func() {})
	d, rerr := tr.Report(context.Background(), cerr, &dryexec.StateDelta{})
	// The guest's end is closed either by the guest or here: a guest
	// still writing (frames after trial.done) gets an error and returns.
	hostEnd.Close()
	<-guestDone
	if rerr != nil {
		t.Fatalf("Report: %v", rerr)
	}
	return d, cerr
}

// wantHostFiles requires the upper dir's two changes in d, whatever the
// guest said: the host walked them.
func wantHostFiles(t *testing.T, d *dryexec.StateDelta, host string) {
	t.Helper()
	got := map[string]string{}
	for _, fc := range d.Files {
		got[fc.Path] = string(fc.Op)
	}
	for _, want := range []string{filepath.Join(host, "planted.txt"), filepath.Join(host, "keep.txt")} {
		if got[want] == "" {
			t.Errorf("the delta lacks %s (files: %v)", want, got)
		}
	}
}

func sendRaw(t *testing.T, raw *os.File, b []byte) {
	if _, err := raw.Write(b); err != nil {
		t.Errorf("guest: %v", err)
	}
}

// A guest that claims the cleanest trial (exit 0, nothing refused, no
// memory, no CPU) while the command wrote two files: the delta's files are
// the host's walk, never the guest's word; what the delta takes from the
// guest (exit status, CPU time, peak RSS) is what docs/containment.md
// lists as reported by the sandbox.
func TestForgedReportHostWalks(t *testing.T) {
	tr, host := forgedTrial(t)
	d, err := converseWith(t, tr, func(_ *os.File, g *wire.Conn) {
		g.Send(wire.KindEvent, wire.VerbTrialExit, 0, &wire.TrialExit{ExitCode: 0})
		g.Send(wire.KindEvent, wire.VerbTrialDone, 0, &wire.TrialDone{})
	})
	if err != nil {
		t.Fatalf("Converse: %v", err)
	}
	wantHostFiles(t, d, host)
	if d.Incomplete || d.Process.ExitCode != 0 {
		t.Errorf("incomplete %v (%s), exit %d", d.Incomplete, d.IncompleteReason, d.Process.ExitCode)
	}
}

// A guest that breaks the protocol after the command was sent, in every
// way the host's reader must survive: each ends the conversation with an
// error, and the delta is still built from the host's walk, marked
// incomplete (so decided block), with the exit status unknown unless the
// guest sent it first. Frame sizes are refused from the length prefix,
// before anything is allocated.
func TestHostileGuestFrames(t *testing.T) {
	prefix := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	exit := func(g *wire.Conn) { g.Send(wire.KindEvent, wire.VerbTrialExit, 0, &wire.TrialExit{ExitCode: 3}) }
	for _, c := range []struct {
		name     string
		exitKnow bool
		guest    func(t *testing.T, raw *os.File, g *wire.Conn)
	}{
		{"a header of 4 GiB", false, func(t *testing.T, raw *os.File, _ *wire.Conn) { sendRaw(t, raw, prefix(^uint32(0))) }},
		{"a header just past the bound", false, func(t *testing.T, raw *os.File, _ *wire.Conn) {
			sendRaw(t, raw, prefix(wire.MaxHeader+1))
		}},
		{"an attachment past the bound", true, func(t *testing.T, raw *os.File, g *wire.Conn) {
			exit(g)
			h := []byte(`{"kind":"event","verb":"vm.alive","nbin":1}`)
			sendRaw(t, raw, append(append(prefix(uint32(len(h))), h...), prefix(wire.MaxAttachment+1)...))
		}},
		{"too many attachments", false, func(t *testing.T, raw *os.File, _ *wire.Conn) {
			h := []byte(`{"kind":"event","verb":"vm.alive","nbin":65}`)
			sendRaw(t, raw, append(prefix(uint32(len(h))), h...))
		}},
		{"a header that is not JSON", false, func(t *testing.T, raw *os.File, _ *wire.Conn) {
			sendRaw(t, raw, append(prefix(3), "\x00\xff{"...))
		}},
		{"an unknown kind", false, func(t *testing.T, raw *os.File, _ *wire.Conn) {
			h := []byte(`{"kind":"root","verb":"trial.exit"}`)
			sendRaw(t, raw, append(prefix(uint32(len(h))), h...))
		}},
		{"an unknown verb", false, func(_ *testing.T, _ *os.File, g *wire.Conn) {
			g.Send(wire.KindEvent, "host.exec", 0, map[string]string{"argv": "sh"})
		}},
		{"an ns guest's file report, which no VM gives", true, func(_ *testing.T, _ *os.File, g *wire.Conn) {
			exit(g)
			g.Send(wire.KindEvent, wire.VerbFSEntry, 0, &wire.FSEntry{Path: "planted.txt", Kind: wire.EntryWhiteout})
		}},
		{"heartbeats carrying bulk bytes", false, func(_ *testing.T, _ *os.File, g *wire.Conn) {
			g.Send(wire.KindEvent, wire.VerbVMAlive, 0, nil, make([]byte, 1<<10), make([]byte, 1<<10))
			g.Send(wire.KindEvent, wire.VerbTrialExit, 0, &wire.TrialExit{})
			g.Send(wire.KindEvent, wire.VerbTrialDone, 0, &wire.TrialDone{})
		}},
		{"trial.done before trial.exit", false, func(_ *testing.T, _ *os.File, g *wire.Conn) {
			g.Send(wire.KindEvent, wire.VerbTrialDone, 0, &wire.TrialDone{})
		}},
		{"trial.exit twice", true, func(_ *testing.T, _ *os.File, g *wire.Conn) { exit(g); exit(g) }},
		{"trial.exit with unknown fields", false, func(_ *testing.T, _ *os.File, g *wire.Conn) {
			g.Send(wire.KindEvent, wire.VerbTrialExit, 0, map[string]any{"exit_code": 0, "host_files": []string{}})
		}},
		{"trial.done with no body", true, func(_ *testing.T, _ *os.File, g *wire.Conn) {
			exit(g)
			g.Send(wire.KindEvent, wire.VerbTrialDone, 0, nil)
		}},
		{"an error frame", false, func(_ *testing.T, _ *os.File, g *wire.Conn) {
			g.Send(wire.KindErr, "", 0, &wire.RemoteError{Code: "internal", Message: "all is well, nothing was written"})
		}},
		{"the stream ends without a report", false, func(*testing.T, *os.File, *wire.Conn) {}},
		{"the stream ends inside a frame", true, func(t *testing.T, raw *os.File, g *wire.Conn) {
			exit(g)
			sendRaw(t, raw, prefix(100)[:3])
		}},
		{"heartbeats, then the stream ends", false, func(_ *testing.T, _ *os.File, g *wire.Conn) {
			for range 1000 {
				g.Send(wire.KindEvent, wire.VerbVMAlive, 0, struct{}{})
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, host := forgedTrial(t)
			d, err := converseWith(t, tr, func(raw *os.File, g *wire.Conn) { c.guest(t, raw, g) })
			if !errors.Is(err, dryexec.ErrGuest) {
				t.Errorf("Converse: %v, want ErrGuest", err)
			}
			wantHostFiles(t, d, host)
			if !d.Incomplete || !strings.Contains(d.IncompleteReason, "the VM failed mid-trial") {
				t.Errorf("incomplete %v: %q", d.Incomplete, d.IncompleteReason)
			}
			if want := map[bool]int{false: -1, true: 3}[c.exitKnow]; d.Process.ExitCode != want {
				t.Errorf("exit %d, want %d", d.Process.ExitCode, want)
			}
		})
	}
}

// Frames after trial.done are never read: the conversation is over, the
// rung waits for the sandbox to end (bounded by WalkGrace) and the delta
// is the host's walk. The guest here writes heartbeats until its stream
// breaks; its writes block once the socket's buffer is full and fail when
// the host closes its end.
func TestFramesAfterDone(t *testing.T) {
	tr, host := forgedTrial(t)
	d, err := converseWith(t, tr, func(_ *os.File, g *wire.Conn) {
		g.Send(wire.KindEvent, wire.VerbTrialExit, 0, &wire.TrialExit{ExitCode: 0})
		g.Send(wire.KindEvent, wire.VerbTrialDone, 0, &wire.TrialDone{})
		for g.Send(wire.KindEvent, wire.VerbTrialExit, 0, &wire.TrialExit{ExitCode: 7}) == nil {
		}
	})
	if err != nil {
		t.Fatalf("Converse: %v", err)
	}
	wantHostFiles(t, d, host)
	if d.Process.ExitCode != 0 || d.Incomplete {
		t.Errorf("exit %d, incomplete %v (%s)", d.Process.ExitCode, d.Incomplete, d.IncompleteReason)
	}
}

// trial.done's FIFO list (gvisor's: FIFOs its kernel keeps in its own
// memory) is the guest's word too: on vm a guest can name FIFOs there
// beside those it had the host make with trial.node. Both count against
// one bound, maxViewNodes: past it the host makes none and says so.
func TestDoneNodesBounded(t *testing.T) {
	tr, host := forgedTrial(t)
	tr.nodesMade = maxViewNodes - 1
	var nodes []wire.SandboxNode
	for i := range 3 {
		nodes = append(nodes, wire.SandboxNode{Path: []byte(filepath.Join(host, "fifo"+strconv.Itoa(i))), Mode: unix.S_IFIFO | 0o644,
			Dirs: dirsOf(host)})
	}
	d, err := converseWith(t, tr, func(_ *os.File, g *wire.Conn) {
		g.Send(wire.KindEvent, wire.VerbTrialExit, 0, &wire.TrialExit{ExitCode: 0})
		g.Send(wire.KindEvent, wire.VerbTrialDone, 0, &wire.TrialDone{Nodes: nodes})
	})
	if err != nil {
		t.Fatalf("Converse: %v", err)
	}
	made := 0
	for _, fc := range d.Files {
		if strings.HasPrefix(filepath.Base(fc.Path), "fifo") {
			made++
		}
	}
	if made != 1 {
		t.Errorf("%d FIFOs of trial.done made with room for 1", made)
	}
	if !d.Incomplete || !strings.Contains(d.IncompleteReason, "FIFOs") {
		t.Errorf("incomplete %v: %q", d.Incomplete, d.IncompleteReason)
	}
}

// dirsOf is p's ancestors below the root, then p itself, as a sandbox
// names them in a SandboxNode's Dirs.
func dirsOf(p string) []wire.SandboxNode {
	var dirs []wire.SandboxNode
	cur := ""
	for _, name := range strings.Split(strings.Trim(p, "/"), "/") {
		cur += "/" + name
		dirs = append(dirs, wire.SandboxNode{Path: []byte(cur), Mode: unix.S_IFDIR | 0o755})
	}
	return dirs
}

// What the guest says in its own words (an error frame's message,
// trial.done's NodesLost) goes into the delta's incomplete reason: a guest
// that is the sandbox's may fill a 1 MiB header with it. The reason keeps
// a bounded part of each, and of the list.
func TestGuestWordsBounded(t *testing.T) {
	long := strings.Repeat("the VM says all is well. ", 40000)
	lost := make([]string, 5000)
	for i := range lost {
		lost[i] = "lost " + strconv.Itoa(i)
	}
	lost[0] = long[:200000]
	for name, guest := range map[string]func(g *wire.Conn){
		"an error frame": func(g *wire.Conn) {
			if err := g.Send(wire.KindErr, "", 0, &wire.RemoteError{Code: long[:10000], Message: long[:900000]}); err != nil {
				t.Error(err)
			}
		},
		"NodesLost": func(g *wire.Conn) {
			g.Send(wire.KindEvent, wire.VerbTrialExit, 0, &wire.TrialExit{})
			g.Send(wire.KindEvent, wire.VerbTrialDone, 0, &wire.TrialDone{NodesLost: lost})
		},
	} {
		t.Run(name, func(t *testing.T) {
			tr, host := forgedTrial(t)
			d, _ := converseWith(t, tr, func(_ *os.File, g *wire.Conn) { guest(g) })
			wantHostFiles(t, d, host)
			if !d.Incomplete || len(d.IncompleteReason) > 16<<10 {
				t.Errorf("incomplete %v, reason of %d bytes", d.Incomplete, len(d.IncompleteReason))
			}
		})
	}
}
