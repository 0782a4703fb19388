package wire

import "github.com/dryexec/dryexec"

// Session verbs. host→guest requests: the guest answers each with resp or err.
// guest→host requests (cache.*, hostcall, emit) may arrive while a host request
// is outstanding; the host answers them on the same stream.
const (
	VerbPing       = "ping"
	VerbExecShell  = "exec_shell" // body: ExecShell → ShellResult
	VerbExecPython = "exec_python"
	VerbPullDiff   = "pull_diff" // body: PullDiff → Diff (file contents as attachments)
	VerbReset      = "reset"
	VerbShutdown   = "shutdown"

	VerbCacheGet  = "cache.get"  // guest→host: body CacheRequest → CacheReply (value as attachment)
	VerbCacheKeys = "cache.keys" // guest→host → CacheKeys
	VerbCacheSet  = "cache.set"  // guest→host: body CacheRequest + attachment; pending until the exec succeeds
	VerbCacheDel  = "cache.del"  // guest→host: body CacheRequest → CacheReply
	VerbHostCall  = "hostcall"   // guest→host: body HostCall → HostCallResult
	VerbEmit      = "emit"       // guest→host: body Emit
)

// Ping is the guest's answer to ping.
type Ping struct {
	Rung      string `json:"rung"`
	Staging   string `json:"staging"` // overlay | scan
	Version   int    `json:"version"`
	Workspace string `json:"workspace"`
	Python    string `json:"python,omitempty"` // the interpreter exec_python uses, "" if none
	Shell     string `json:"shell,omitempty"`  // the shell exec_shell runs in
	// Renderer names how print entries render the printed objects
	// (PrintObject.Repr) and the echo of a final expression.
	Renderer string `json:"renderer,omitempty"`
	// PythonReady: a runner waits for the next exec_python (none until the
	// first one, unless SessionStart.PythonWarm).
	PythonReady bool `json:"python_ready,omitempty"`
}

// Caps are one exec's output caps, over the session's defaults: Entry bounds
// each print entry's text (Python), Total the transcript and, for Python,
// all print entries' text together. 0 keeps the default; a value over the
// hard ceiling is lowered to it. Where output was dropped, the kept text ends
// (print entries) or begins (transcript, whose tail is kept) with
// CapsMarker.
type Caps struct {
	Entry int `json:"entry,omitempty"`
	Total int `json:"total,omitempty"`
}

// CapsMarker is the visible mark left where a cap dropped output.
const CapsMarker = "[dryexec: output dropped by caps]"

// ExecShell runs a shell command with the session's persistent cwd and env.
type ExecShell struct {
	Command   string `json:"command"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	Caps      *Caps  `json:"caps,omitempty"`
}

// ShellResult is one exec_shell.
type ShellResult struct {
	ExitCode   int      `json:"exit_code"`
	TimedOut   bool     `json:"timed_out,omitempty"`
	Transcript string   `json:"transcript"` // stdout and stderr merged in arrival order
	Stdout     string   `json:"stdout"`
	Stderr     string   `json:"stderr"`
	Truncated  bool     `json:"truncated,omitempty"`
	Cwd        string   `json:"cwd"`
	Warnings   []string `json:"warnings,omitempty"`
	DurationNS int64    `json:"duration_ns"`
	// Violations are what the sandbox refused during the exec (ns rung).
	Violations []Violation `json:"violations,omitempty"`
	// OOMKills are the processes the sandbox's own kernel OOM-killed
	// during the exec (vm rung: its RAM is the memory limit), which the
	// host cannot see: the host makes them a violation of the session's
	// (Containment.Violations, as the host's cgroup's OOM kills are on
	// ns) and clears the field.
	OOMKills int64 `json:"oom_kills,omitempty"`
	// Network is what netsim logged during the exec (ns rung), filled on the
	// host from its own log: whatever the guest put here is replaced.
	Network []dryexec.NetworkEvent `json:"network,omitempty"`
}

// ExecPython runs code in the sandbox's Python.
type ExecPython struct {
	Code      string           `json:"code"`
	Inputs    map[string]Value `json:"inputs,omitempty"`
	TimeoutMS int64            `json:"timeout_ms,omitempty"`
	// Fresh runs the code in a runner started for this call (a pre-started
	// one is killed) and pre-starts none after it: the old behaviour, kept
	// for comparison (benchmarks).
	Fresh bool `json:"fresh,omitempty"`
	// HostObjects are the host objects' names, each also bound as a global
	// of its own name (the host leaves it empty when that is turned off).
	HostObjects []string `json:"host_objects,omitempty"`
	Caps        *Caps    `json:"caps,omitempty"`
}

// Value is the tagged codec every value crossing the boundary goes through: no
// pickle, nothing executable. Exactly one of the fields is set, by Type.
type Value struct {
	Type string `json:"type"` // json | bytes | file
	JSON any    `json:"json,omitempty"`
	// Bytes are base64 in JSON; a message too large for a frame header carries
	// its whole body as attachments instead (see EncodeBody).
	Bytes []byte `json:"bytes,omitempty"`
	Path  string `json:"path,omitempty"` // file: a path inside the workspace
}

// PrintEntry is one print() call, or (Kind "echo") the value of a final bare
// expression, as a REPL shows it.
type PrintEntry struct {
	Kind      string `json:"kind,omitempty"` // "" (a print) or "echo"
	Type      string `json:"type"`           // the printed value's type name(s)
	Len       int    `json:"len"`            // length of the full text
	Text      string `json:"text"`
	Truncated bool   `json:"truncated,omitempty"`
	// Objects are the printed objects, one each (the echoed value for an
	// echo), up to MaxPrintObjects.
	Objects []PrintObject `json:"objects,omitempty"`
}

// MaxPrintObjects is how many objects one print entry describes.
const MaxPrintObjects = 32

// PrintObject is one printed object.
type PrintObject struct {
	Type string `json:"type"`
	// Repr is the object rendered by Ping.Renderer, within PrintReprMax bytes.
	Repr      string `json:"repr"`
	Truncated bool   `json:"truncated,omitempty"`
	// Len is len(object) for a sized object (nil otherwise): for a list, its
	// items, not the bytes of its text.
	Len *int `json:"len,omitempty"`
}

// PrintReprMax bounds one PrintObject.Repr.
const PrintReprMax = 1024

// PrintRenderer is Ping.Renderer: repr(), clipped to PrintReprMax bytes.
const PrintRenderer = "repr"

// PythonError describes an exception.
type PythonError struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback"`
}

// PythonResult is one exec_python.
type PythonResult struct {
	OK             bool              `json:"ok"`
	TimedOut       bool              `json:"timed_out,omitempty"`
	Transcript     string            `json:"transcript"`
	Prints         []PrintEntry      `json:"prints"`
	PrintsDropped  int               `json:"prints_dropped,omitempty"`
	Outputs        map[string]Value  `json:"outputs"`
	OutputsSkipped map[string]string `json:"outputs_skipped"`
	Error          *PythonError      `json:"error,omitempty"`
	DurationNS     int64             `json:"duration_ns"`
	// Violations are what the sandbox refused during the exec (ns rung).
	Violations []Violation `json:"violations,omitempty"`
	// OOMKills are the processes the sandbox's own kernel OOM-killed
	// during the exec (vm rung: its RAM is the memory limit), which the
	// host cannot see: the host makes them a violation of the session's
	// (Containment.Violations, as the host's cgroup's OOM kills are on
	// ns) and clears the field.
	OOMKills int64 `json:"oom_kills,omitempty"`
	// Network is what netsim logged during the exec (ns rung), filled on the
	// host from its own log: whatever the guest put here is replaced.
	Network []dryexec.NetworkEvent `json:"network,omitempty"`
}

// PullDiff asks for the workspace's changes since the baseline.
type PullDiff struct {
	Rebase bool `json:"rebase,omitempty"` // and make the current state the new baseline
}

// WorkspaceEnv names the variable that holds the workspace's path in every
// shell and Python exec of a session, on every rung.
const WorkspaceEnv = "DRYEXEC_WORKSPACE"

// Diff lists the changes: each write's content follows as attachments, in order,
// Size bytes each, chunked to MaxAttachment.
type Diff struct {
	Writes  []DiffWrite `json:"writes"`
	Deletes []string    `json:"deletes"`
	Modes   []DiffMode  `json:"modes"`
}

// DiffWrite is one file whose content differs from the baseline.
type DiffWrite struct {
	Path string `json:"path"` // relative to the workspace
	Size int64  `json:"size"`
	Mode uint32 `json:"mode"`
	Link string `json:"link,omitempty"` // a symlink: no content follows
}

// DiffMode is a permission change without a content change.
type DiffMode struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode"`
}

// Cache limits, enforced by the host (package session) on what the sandbox
// writes, and by the guest on what it relays.
const (
	// MaxCacheKey bounds a key's length in bytes.
	MaxCacheKey = 4096
	// MaxCacheValue bounds one value: 64 MiB, carried in chunks of
	// MaxAttachment, one per call.
	MaxCacheValue = 64 << 20
)

// CacheRequest is the body of cache.get, cache.set and cache.del: the key
// plus the fields of the chunked transfer. A value larger than MaxAttachment
// moves in several calls, one attachment each:
//
//   - cache.get {key, offset, gen} answers CacheReply{found, size, gen} and
//     attachment 0 = value[offset : offset+MaxAttachment]. The first call has
//     offset 0 and learns gen; later calls send it back, and if the entry
//     changed in between the host refuses with code "changed" and the guest
//     starts again. head asks for found and size only, no attachment.
//   - cache.set {key, offset, size} + attachment 0 = value[offset : …]: chunks
//     in order, starting at 0; the write is recorded (pending until the exec
//     succeeds) when offset+len reaches size. A 0-byte value is one call with
//     an empty attachment.
//   - cache.del {key} answers CacheReply{found}.
type CacheRequest struct {
	Key    string `json:"key"`
	Offset int64  `json:"offset,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Gen    uint64 `json:"gen,omitempty"`
	Head   bool   `json:"head,omitempty"`
	// Kind tags a set's value ("" raw bytes, "pickle"); stored with it.
	Kind string `json:"kind,omitempty"`
}

// CacheReply answers cache.get and cache.del: whether the key is there, and
// for cache.get the value's total size, generation and kind.
type CacheReply struct {
	Found bool   `json:"found"`
	Size  int64  `json:"size,omitempty"`
	Gen   uint64 `json:"gen,omitempty"`
	Kind  string `json:"kind,omitempty"`
}

// CacheKeys answers cache.keys.
type CacheKeys struct {
	Keys []string `json:"keys"`
}

// HostCall calls a method of an object the host registered.
type HostCall struct {
	Object string  `json:"object"`
	Method string  `json:"method"`
	Args   []Value `json:"args"`
	// Kwargs are keyword arguments: identifiers, never private ("_...").
	Kwargs map[string]Value `json:"kwargs,omitempty"`
}

// HostCallResult is a host call's return value.
type HostCallResult struct {
	Value Value `json:"value"`
}

// Emit delivers one event to the host, in order.
type Emit struct {
	Name  string `json:"name"`
	Value Value  `json:"value"`
}

// VerbSessionStart is the host's first request to a session guest.
const VerbSessionStart = "session.start"

// SessionStart configures a session guest.
type SessionStart struct {
	Rung string `json:"rung"`
	// Workspace is the workspace's path as the sandbox sees it. For the host
	// rung it is a directory the host created; the ns rung mounts it.
	Workspace string `json:"workspace"`
	// Baseline (scan staging only) is where the guest keeps its copy of the
	// baseline; it must not be inside Workspace.
	Baseline string `json:"baseline,omitempty"`
	// Env is the initial environment of shell and Python execs.
	Env []string `json:"env"`
	// WallNS is the host's wall clock as it sent this (ns since the
	// epoch), for a guest on a kernel whose clock starts from elsewhere
	// (the vm rung's VM: the RTC's whole second), as TrialStart.WallNS.
	WallNS int64 `json:"wall_ns,omitempty"`
	// OutputCap bounds each exec's transcript and streams (the tail is kept).
	OutputCap int `json:"output_cap"`
	// Shell is the shell execs run in: "" for bash where the sandbox has
	// /bin/bash, else /bin/sh; "bash", "sh", or an absolute path.
	Shell string `json:"shell,omitempty"`
	// PythonWarm starts the first exec_python's runner at once; otherwise it
	// starts with the first exec_python (later ones are pre-started), so that
	// a session that never runs Python keeps no interpreter.
	PythonWarm bool `json:"python_warm,omitempty"`
	// CommandPrefix is an argv the guest puts before every command it
	// starts (a shell exec's shell, a Python runner): the seatbelt rung's
	// `sandbox-exec -p PROFILE --`, which confines each command while the
	// guest itself, which must write the baseline, runs unconfined. Empty
	// on every other rung, whose guest confines its commands otherwise.
	CommandPrefix []string `json:"command_prefix,omitempty"`
	// ns rung only:
	Mounts []MountSpec `json:"mounts,omitempty"`
	// Image: as in TrialStart.
	Image         []string `json:"image,omitempty"`
	UpperSize     int64    `json:"upper_size,omitempty"`
	Hostname      string   `json:"hostname,omitempty"`
	Rootless      bool     `json:"rootless,omitempty"`
	CommandUserNS bool     `json:"command_userns,omitempty"`
	CommandUID    int      `json:"command_uid,omitempty"`
	CommandGID    int      `json:"command_gid,omitempty"`
	// Masks and Hidden: as in TrialStart.
	Masks  []string `json:"masks,omitempty"`
	Hidden []string `json:"hidden,omitempty"`
	// CommandNPROC: as TrialStart.CommandNPROC, put on each process an exec
	// starts (the shell, a Python runner) before it runs.
	CommandNPROC int64 `json:"command_nproc,omitempty"`
	// Net, NetFD, TrustBundle, TrustPath: as in TrialStart. The guest creates
	// the TUN device before it builds the view and hands it over NetFD.
	Net         bool   `json:"net,omitempty"`
	NetFD       int    `json:"net_fd,omitempty"`
	TrustBundle []byte `json:"-"` // the frame's first attachment
	TrustPath   string `json:"trust_path,omitempty"`
	// ForkFD (ns) is a unix socket of the guest's over which the host
	// sends a branch's layers (SCM_RIGHTS, which a framed stream cannot
	// carry) before fork.adopt: a session opened ahead of a fork (a warm
	// branch) is started before the layers it will adopt exist. 0: none.
	ForkFD int `json:"fork_fd,omitempty"`
	// LauncherCgroups (ns): as TrialStart.LauncherCgroups, for the launcher
	// every exec starts from.
	LauncherCgroups []int `json:"launcher_cgroups,omitempty"`
}

// ReadFile asks for a chunk of a workspace file (pull_diff contents).
const VerbReadFile = "read_file"

// ReadFile is a chunk request; the answer is one attachment of ≤ MaxAttachment.
type ReadFile struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset"`
}

// PushTree chunks: push_tree.begin, push_tree.data (attachments), push_tree.end.
const (
	VerbPushBegin = "push_tree.begin"
	VerbPushData  = "push_tree.data"
	VerbPushEnd   = "push_tree.end"
)

// VerbExecStarted (guest→host event, host and seatbelt rungs) names the process an exec
// started, the leader of its own session: the host kills that session if the
// guest dies or is closed mid-exec, since nothing else there would.
const VerbExecStarted = "exec.started"

// ExecStarted is the body of exec.started.
type ExecStarted struct {
	PID int `json:"pid"`
}
