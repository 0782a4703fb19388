package wire

import "golang.org/x/sys/unix"

// Verbs of a one-shot ns trial. The host sends VerbTrialStart (the sandbox:
// mounts, masks, network); the guest builds the view and its confinement and
// answers VerbTrialMounts. The host sends VerbTrialJoined once the guest is in
// the trial's cgroups (on a cgroup v1 host that join finishes in the
// background): only then does the guest start the command's process (the
// command stub), which waits on StubFD for the command; the guest says so
// with VerbTrialReady, the first frame after trial.joined (a pool counts a
// sandbox settled from then on: a trial taken then waits for nothing in
// it; one taken before waits for the stub's start). To run a trial the
// host writes the command to StubFD itself (StubRequest) and sends
// VerbTrialRun (the command's timeout, and its argv and directory for the
// guest's messages). A warm pool sends trial.start and trial.joined ahead
// and the rest when a trial is asked for; a cold trial sends all at once.
// The guest then answers with events: VerbTrialExit
// once the command and everything it started are gone, then
// VerbFSEntry/VerbFSData/VerbFSHole for each upper-dir entry, then
// VerbTrialDone. A
// guest-side failure is a KindErr frame.
const (
	VerbTrialStart  = "trial.start"
	VerbTrialMounts = "trial.mounts" // body: TrialMounts, before the command starts
	VerbTrialJoined = "trial.joined" // no body
	VerbTrialReady  = "trial.ready"  // no body: the command stub is started and waiting
	VerbTrialRun    = "trial.run"    // body: TrialRun
	VerbTrialExit   = "trial.exit"
	VerbFSEntry     = "fs.entry" // body: FSEntry; a file's content follows as fs.data frames
	VerbFSData      = "fs.data"  // one attachment of file content
	// VerbFSHole is a run of zeros in a file's content that the file does
	// not store (a hole: SEEK_HOLE): body FSHole, no attachment. A sparse
	// file of 8 EiB costs one frame, not 8 EiB of zeros on the stream.
	VerbFSHole    = "fs.hole"
	VerbTrialDone = "trial.done" // body: TrialDone
	// VerbTrialNode is the vm trial guest's request, while the command
	// runs, that the host make a FIFO, or chmod one, or set a file's times
	// to the nanosecond, through the view (body TrialNode; the host answers
	// KindResp with TrialNodeResult, same ID): QEMU's 9p server can do
	// neither of the first two, and the VM's 9p client truncates given
	// times to whole seconds (docs/architecture.md, "The vm rung").
	VerbTrialNode = "trial.node"
)

// TrialNode asks the host to make the FIFO Name in Dir (Op "mknod") with
// Mode (type and permission bits, the caller's umask applied) and owner, or
// to set the permission bits of the FIFO Name in Dir to Mode (Op "chmod"),
// or to set the times of Name in Dir, not followed, to Times (Op "utimes":
// atime then mtime, seconds and nanoseconds each, as utimensat(2) takes
// them, UTIME_NOW and UTIME_OMIT included).
// Dir is an absolute path in the view as the sandbox resolved it. The host
// trusts none of it: Dir is resolved again beneath the view's root, never
// outside it; only a FIFO is made or chmodded, and times are set on Name
// itself, never through a link.
type TrialNode struct {
	Op   string `json:"op"`
	Dir  []byte `json:"dir"`
	Name []byte `json:"name"`
	Mode uint32 `json:"mode"`
	UID  uint32 `json:"uid,omitempty"`
	GID  uint32 `json:"gid,omitempty"`
	// Times is Op "utimes"'s: atime sec, atime nsec, mtime sec, mtime nsec.
	Times [4]int64 `json:"times,omitzero"`
}

// Ops of TrialNode.
const (
	NodeMknod  = "mknod"
	NodeChmod  = "chmod"
	NodeUtimes = "utimes"
)

// TrialNodeResult is the errno the call gets (0: made).
type TrialNodeResult struct {
	Errno int `json:"errno,omitempty"`
}

// FSHole is the body of fs.hole: N bytes of zeros come next in the content.
type FSHole struct {
	N int64 `json:"n"`
}

// MountSpec is one host mount the guest must overlay.
type MountSpec struct {
	// Path is the absolute mount point, as the host's mountinfo gives it.
	Path string `json:"path"`
}

// TrialRun is the command of a trial: what the host writes to the stub
// (StubRequest), and, without Env, what trial.run carries.
type TrialRun struct {
	Argv      []string `json:"argv"`
	Env       []string `json:"env"`
	Cwd       string   `json:"cwd"`
	TimeoutMS int64    `json:"timeout_ms"`
	// Stdin: the command reads fd StdinFD instead of /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// StartMonoNS is when the host wrote the command to the stub, on
	// CLOCK_MONOTONIC (MonoNow). The ns guest shares the host's clock (it
	// has no time namespace), and the command may be over before trial.run
	// reaches it: its duration is measured from here. 0: from trial.run.
	StartMonoNS int64 `json:"start_mono_ns,omitempty"`
}

// MonoNow is CLOCK_MONOTONIC in nanoseconds: the clock of StartMonoNS.
func MonoNow() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// TrialStart tells the guest what sandbox to build. Its TrialRun part is
// what the host means to run; the guest takes the command from trial.run.
type TrialStart struct {
	TrialRun
	// WallNS is the host's wall clock as it sent this (ns since the epoch):
	// a VM's guest sets the VM's clock from it, which otherwise starts from
	// the RTC's whole second, up to a second behind the host's, whose clock
	// 9p stamps the command's files with.
	WallNS int64       `json:"wall_ns,omitempty"`
	Mounts []MountSpec `json:"mounts"`
	// Image, when set, replaces the host's mounts: the unpacked layer
	// directories of an OCI image (host paths, lowest first), stacked as the
	// lowers of the one overlay at "/" (Mounts is then just "/").
	Image     []string `json:"image,omitempty"`
	Hostname  string   `json:"hostname"`
	UpperSize int64    `json:"upper_size"`
	// SeedUppers (gvisor, a fork's branch) is a directory holding, as N/,
	// the contents each upper dir N starts with (the parent's, copied at
	// the fork), put in place before its overlay is mounted.
	SeedUppers string `json:"seed_uppers,omitempty"`
	// Rootless: the guest runs in a user namespace it was created with (the host
	// user is not root): overlays use user.* xattrs, and host mounts are locked.
	Rootless bool `json:"rootless,omitempty"`
	// CommandUserNS: start the command in a user namespace of its own, so that
	// its capabilities reach none of the trial's other namespaces. As root the
	// map is the identity; rootless, the guest is root of its own namespace and
	// the command's namespace maps CommandUID/GID (the caller's ids) to it.
	CommandUserNS bool `json:"command_userns,omitempty"`
	CommandUID    int  `json:"command_uid,omitempty"`
	CommandGID    int  `json:"command_gid,omitempty"`
	// NoMemoryTrace turns the memory delta off: the guest then does not trace
	// the command's processes, so a debugger or strace inside the trial works.
	// It is the sandbox's, not the command's: the command's process is
	// traced from before the command is sent.
	NoMemoryTrace bool `json:"no_memory_trace,omitempty"`
	// LauncherCgroups are fds (the guest's) of the trial's v1 cgroup tasks
	// files: the guest was born outside the limits its commands run under,
	// and its launcher thread enters them alone, by writing "0" to each,
	// before it starts anything (guest.enterCgroups). Empty: the host put
	// the guest in its groups itself.
	LauncherCgroups []int `json:"launcher_cgroups,omitempty"`
	// Masks are host paths (absolute, symlinks resolved by the host) the
	// sandbox sees empty: a directory as an empty-file mirror of its names, a
	// file as an empty file (guest/mask_linux.go).
	Masks []string `json:"masks,omitempty"`
	// Hidden are dryexec's own paths (its home, the daemon's state and
	// socket; absolute, symlinks resolved by the host): the sandbox sees each
	// as an empty directory or file, mode 0, on a read-only mount, so that
	// nothing of it can be read, listed or written (guest/mask_linux.go).
	Hidden []string `json:"hidden,omitempty"`
	// Net: the guest creates the sandbox's TUN device (netsim's link) and
	// hands it to the host over descriptor NetFD, a socket of its own (the fd
	// rides SCM_RIGHTS, which a framed stream cannot carry). NetFD is 0 when
	// Net is false.
	Net   bool `json:"net,omitempty"`
	NetFD int  `json:"net_fd,omitempty"`
	// NetFilesOnly (with Net): the sandbox's link is not a TUN device the
	// guest makes but one the host wired itself (the vm rung: the VM's
	// virtio-net, whose frames QEMU sends to netsim); the view guest only
	// binds netsim's resolv.conf and trust bundle, and NetFD is 0.
	NetFilesOnly bool `json:"net_files_only,omitempty"`
	// NetLazy (with Net, ns trials): the guest hands the TUN device over
	// only once it has a packet to read, and, if one is queued then, before
	// it sends trial.exit; the host starts netsim when the device arrives. A
	// trial that sends nothing starts no netsim process (the host then logs
	// no event, as netsim would have logged none).
	NetLazy bool `json:"net_lazy,omitempty"`
	// TrustBundle (PEM: the host's roots plus netsim's CA) is bound read-only
	// over TrustPath, and netsim's resolv.conf over /etc/resolv.conf, so that
	// the sandbox resolves and trusts through netsim. Neither is a change.
	// The bundle (a few hundred KiB) rides the frame's first attachment, not
	// the JSON: decoding it as base64 in JSON cost a starting guest ≈ 2 ms.
	TrustBundle []byte `json:"-"`
	TrustPath   string `json:"trust_path,omitempty"`
	// TrustSystem and TrustCA (an ns trial's, instead of TrustBundle): the
	// guest makes the bundle itself, before it enters the view, from the
	// host's roots in the file TrustSystem (none if it is missing) and
	// TrustCA (netsim's CA, PEM) after them, as netsim.TrustOf does; the
	// roots are copied within the kernel. The host then neither reads nor
	// sends them (a few hundred KiB: ≈ 3 ms of a cold trial's CPU here, the
	// host's and the guest's).
	TrustSystem string `json:"trust_system,omitempty"`
	TrustCA     []byte `json:"trust_ca,omitempty"`
	// CommandNPROC, when not 0, is the command's RLIMIT_NPROC, put on it
	// before it runs (the rlimit fallback, where no cgroup holds the pids
	// limit). The guest's own limit, set by the host, is higher: the limit
	// counts every process and thread of the user, and a fork bomb that took
	// them all would leave the guest unable to start a thread.
	CommandNPROC int64 `json:"command_nproc,omitempty"`
	// Pooled: the sandbox is made ahead and waits in a warm pool for its
	// trial, so the guest may spend CPU before trial.ready to make the
	// trial's own path cheaper (a collection: the trial's allocations then
	// reuse memory already faulted in). A cold trial's command is sent at
	// once, and such work would only delay it.
	Pooled bool `json:"pooled,omitempty"`
}

// Attachments lists b as a frame's attachments: none when it is empty.
func Attachments(b []byte) [][]byte {
	if len(b) == 0 {
		return nil
	}
	return [][]byte{b}
}

// TrialMounts lists the host path each upper dir stands for; fs.entry's mount
// index points into it. A host mount is one upper dir, unless the guest had to
// split it (rootless: a lower with locked mounts beneath it), when each part is
// one. The host checks every path lies within a mount it asked for.
type TrialMounts struct {
	Paths []string `json:"paths"`
	// ScratchFD is the guest's descriptor of the scratch tmpfs that holds
	// the upper dirs (u/0 … beneath it). The host opens it through
	// /proc/PID/fd before the command starts, so that it can walk the upper
	// dirs itself if the guest dies or breaks the protocol mid-trial. 0: none.
	ScratchFD int `json:"scratch_fd,omitempty"`
}

// TrialDone ends a trial's report (trial.done): what is known only once
// every process of the sandbox is reaped.
type TrialDone struct {
	CPUUserNS int64 `json:"cpu_user_ns"`
	CPUSysNS  int64 `json:"cpu_sys_ns"`
	MaxRSS    int64 `json:"max_rss_bytes"`
	// Nodes are FIFOs the command left that the sandbox's kernel keeps in
	// its own memory, absent from the upper dirs (gVisor's gofer makes
	// regular files only): the host makes each in the upper dirs before it
	// walks them. NodesLost says why a FIFO the command made could not be
	// found or placed: the delta is then incomplete, with that reason.
	Nodes     []SandboxNode `json:"nodes,omitempty"`
	NodesLost []string      `json:"nodes_lost,omitempty"`
}

// SandboxNode is a FIFO as the sandbox's kernel shows it at the end of the
// command, with its ancestors (Dirs, the root's child first, its parent
// last), which the host makes where an upper dir lacks them. Path is
// absolute in the sandbox, in bytes (a name need not be UTF-8).
type SandboxNode struct {
	Path    []byte        `json:"path"`
	Mode    uint32        `json:"mode"` // st_mode, type bits included
	UID     uint32        `json:"uid"`
	GID     uint32        `json:"gid"`
	AtimeNS int64         `json:"atime_ns"`
	MtimeNS int64         `json:"mtime_ns"`
	CtimeNS int64         `json:"ctime_ns"`
	Dirs    []SandboxNode `json:"dirs,omitempty"`
}

// TrialExit reports how the command ended. The guest sends it as soon as no
// process of the sandbox can act any more: all are dead, or the command is
// the last one and stopped at its exit (it runs no more code of its own: it
// is let go and reaped while the host reads the containment's counters).
type TrialExit struct {
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	StartError string `json:"start_error,omitempty"` // the command could not be started
	DurationNS int64  `json:"duration_ns"`
	UpperFull  bool   `json:"upper_full,omitempty"`
	UpperUsed  int64  `json:"upper_used,omitempty"`
	// EndMonoNS is when the command ended, on MonoNow's clock. The ns guest,
	// which shares the host's clock, sends it with DurationNS 0 when it had
	// not yet read trial.run (its start) at that moment: the host, which
	// wrote the start, dates the command, and the report does not wait for
	// the guest's reader to be scheduled.
	EndMonoNS int64 `json:"end_mono_ns,omitempty"`
	// Violations are what the sandbox refused (seccomp: kind "syscall").
	Violations []Violation `json:"violations,omitempty"`
	// OOMKills are the processes the VM's own kernel OOM-killed while the
	// command ran (vm rung: the VM's RAM is the memory limit).
	OOMKills int64 `json:"oom_kills,omitempty"`
	// Memory is what the trial's processes wrote to memory (nil: not measured).
	Memory *MemoryUse `json:"memory,omitempty"`
}

// Violation is one thing the sandbox refused, as the guest saw it. The host
// bounds and re-checks it like everything else the guest says.
type Violation struct {
	Kind   string `json:"kind"` // syscall | limit | path | network
	Detail string `json:"detail"`
	PID    int    `json:"pid,omitempty"` // in the sandbox's pid namespace
	Exe    string `json:"exe,omitempty"`
}

// MemoryUse is the memory delta of a trial's processes.
type MemoryUse struct {
	// PagesWritten sums, over the trial's processes, the private pages each
	// had dirtied when it exited (see docs/containment.md for what counts).
	PagesWritten int64 `json:"pages_written"`
	BytesWritten int64 `json:"bytes_written"`
	// Method: "smaps_exit" (measured at each exit under ptrace) or "none".
	Method string `json:"method"`
	// Processes is how many exits were measured.
	Processes int `json:"processes,omitempty"`
}

// File descriptors the host hands the ns guest, after stdin/stdout/stderr.
const (
	CtrlFD   = 3 // the wire stream
	StdoutFD = 4 // the command's stdout (a pipe the host reads)
	StderrFD = 5
	StdinFD  = 6 // the command's stdin when TrialRun.Stdin (a pipe the host writes)
	StubFD   = 7 // the command stub's request pipe (StubRequest), written by the host
)
