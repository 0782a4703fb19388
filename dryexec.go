// Package dryexec holds the domain of dryexec: the Action a caller proposes, the
// StateDelta a trial returns, the Rung interface every isolation backend implements,
// and the typed errors callers test with errors.Is / errors.As.
//
// It contains no OS code. Implementations live in subpackages named after what they
// depend on: rung/linuxns (Linux namespaces + overlayfs), fsdelta (turning what a
// sandbox wrote into FileChanges), store (trials kept on disk), guest (the supervisor
// that runs inside every boundary).
package dryexec

import (
	"crypto/rand"
	"encoding/base32"
	"math"
	"strings"
	"time"
)

// SchemaV1 is the value of StateDelta.Schema for this version of the contract.
const SchemaV1 = "dryexec.statedelta/v1"

// Action is what a caller proposes: one command, run as if on the host.
type Action struct {
	Argv []string `json:"argv"`
	// Cwd is an absolute host path; the command starts there inside the sandbox.
	Cwd string `json:"cwd"`
	// Env is the command's whole environment. Callers build it from an allowlist,
	// never from their own environment wholesale, because the delta records it.
	Env       map[string]string `json:"env"`
	TimeoutMS int64             `json:"timeout_ms"`
}

// Timeout returns the action's timeout as a Duration (0 means none).
func (a Action) Timeout() time.Duration { return time.Duration(a.TimeoutMS) * time.Millisecond }

// StateDelta is everything one trial did, as the host would see it if committed.
// Its JSON form is the contract `dryexec.statedelta/v1` (schema/statedelta.v1.json).
type StateDelta struct {
	Schema  string       `json:"schema"`
	TrialID string       `json:"trial_id"`
	Rung    string       `json:"rung"`
	Action  Action       `json:"action"`
	Process Process      `json:"process"`
	Files   []FileChange `json:"files"`
	// Touched lists the paths whose only change is their mtime (op touch):
	// content, mode, kind, owner and link target are as the host has them
	// (touch, sed -i or a rebuild writing identical bytes, git freshening an
	// object, a directory that gained and lost an entry). Not changes in the
	// contract's sense, so not in Files nor in Totals and not seen by the
	// policy; commit sets these mtimes, so that make and other mtime-driven
	// tools see what they saw in the trial.
	Touched    []FileChange   `json:"touched,omitempty"`
	Network    []NetworkEvent `json:"network"`
	Memory     Memory         `json:"memory"`
	Violations []Violation    `json:"violations"`
	Totals     Totals         `json:"totals"`
	Decision   Decision       `json:"decision"`
	Receipt    Receipt        `json:"receipt"`
	// Warnings say how this trial's containment fell short of what was asked
	// (e.g. no cgroup limits could be set rootless) — facts about the sandbox,
	// not something the command did; those are Violations.
	Warnings []string `json:"warnings,omitempty"`
	// Incomplete says the delta may not hold everything the command did (the
	// guest supervisor died, the walk ran out of time): the host built it from
	// what it could see itself. Such a delta is always decided block.
	Incomplete       bool   `json:"incomplete,omitempty"`
	IncompleteReason string `json:"incomplete_reason,omitempty"`
	// Image, when set, says the trial ran on an image's root filesystem,
	// not the host's: the paths are the image's (docs/images.md).
	Image *DeltaImage `json:"image,omitempty"`

	// fileSrc, when not nil, holds the file changes instead of Files
	// (SetFileSource).
	fileSrc FileSource
}

// Normalize makes the empty sections of d encode as [] rather than null, so that
// every produced delta has the same shape, and fills Schema.
func (d *StateDelta) Normalize() {
	d.Schema = SchemaV1
	if d.Files == nil && d.fileSrc == nil {
		d.Files = []FileChange{}
	}
	if d.Network == nil {
		d.Network = []NetworkEvent{}
	}
	if d.Violations == nil {
		d.Violations = []Violation{}
	}
	if d.Decision.Reasons == nil {
		d.Decision.Reasons = []string{}
	}
	if d.Action.Env == nil {
		d.Action.Env = map[string]string{}
	}
	if d.Action.Argv == nil {
		d.Action.Argv = []string{}
	}
}

// Process is how the command ran.
type Process struct {
	ExitCode        int    `json:"exit_code"`
	Signal          string `json:"signal"`
	TimedOut        bool   `json:"timed_out"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	DurationNS      int64  `json:"duration_ns"`
	// CPUUserNS and CPUSysNS are the CPU time of the command, from its
	// exec on (the sandbox's start of its process is not counted), and of
	// every process it started.
	CPUUserNS    int64 `json:"cpu_user_ns"`
	CPUSysNS     int64 `json:"cpu_sys_ns"`
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
}

// Op is what happened to one path.
type Op string

// The ops of a FileChange. A rename is a delete plus a create.
const (
	OpCreate Op = "create"
	OpModify Op = "modify"
	OpDelete Op = "delete"
	// OpChmod is a metadata change of the path: its mode, its owner
	// (BeforeUID/BeforeGID set) or both.
	OpChmod   Op = "chmod"
	OpMkdir   Op = "mkdir"
	OpRmdir   Op = "rmdir"
	OpSymlink Op = "symlink"
	// OpTouch is only in StateDelta.Touched: the path's mtime moved and
	// nothing else about it changed.
	OpTouch Op = "touch"
)

// Kind is the type of the path after the change (before it, for delete/rmdir).
type Kind string

// The kinds of a FileChange.
const (
	KindFile    Kind = "file"
	KindDir     Kind = "dir"
	KindSymlink Kind = "symlink"
	// KindFIFO is a named pipe: committed as a named pipe.
	KindFIFO Kind = "fifo"
	// KindOther is a socket or a device node, which commit refuses.
	KindOther Kind = "other"
)

// FileChange is one path the trial changed. Path is absolute, as the host sees it.
type FileChange struct {
	Path string `json:"path"`
	Op   Op     `json:"op"`
	Kind Kind   `json:"kind"`
	Size int64  `json:"size"`
	// Mode is the octal permission string ("0644", "4755") after the change, or
	// before it for delete/rmdir.
	Mode string `json:"mode"`
	// SHA256 is the new content's hash (files only; empty for delete).
	SHA256 string `json:"sha256"`
	// BeforeSHA256 is the host content's hash when the trial started (modify,
	// chmod and delete of files), which commit checks for conflicts.
	BeforeSHA256 string `json:"before_sha256"`
	LinkTarget   string `json:"link_target"`
	// UID and GID own the path after the change (before it, for delete/rmdir).
	// Commit applies them when it runs as root.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// BeforeMode is the mode the host had (chmod, modify, delete); not in the
	// contract's example but needed to check and explain mode changes.
	BeforeMode string `json:"before_mode,omitempty"`
	// BeforeUID and BeforeGID are the host's owner when the change moves it
	// (a chmod that is a chown, or a modify that also changes the owner);
	// nil otherwise. Pointers: root's 0 is an owner, not an absence. Commit
	// refuses when the host's owner moved since the trial started.
	BeforeUID *int `json:"before_uid,omitempty"`
	BeforeGID *int `json:"before_gid,omitempty"`
	// Diff is a unified diff, only for small text files.
	Diff string `json:"diff"`
	// MtimeNS is the modification time the command left (nanoseconds since the
	// epoch) on a created or modified file, directory or symlink; commit sets it,
	// as cp -a does, so that make and .pyc checks see what they saw in the trial.
	MtimeNS int64 `json:"mtime_ns,omitempty"`
	// BeforeMtimeNS is the host's mtime when the trial started, on a touch
	// (StateDelta.Touched): commit refuses to set MtimeNS over a file whose
	// mtime moved since.
	BeforeMtimeNS int64 `json:"before_mtime_ns,omitempty"`
	// LinkGroup, when not 0, is shared by every path in this delta that is one
	// inode (hard links) after the trial; commit links them instead of copying.
	LinkGroup int `json:"link_group,omitempty"`
	// ContentKept is nil or true when the new content is stored with the trial;
	// false (with ContentReason) when it was not (a cap, a quota, the deadline):
	// the path is still listed, and commit refuses it.
	ContentKept   *bool  `json:"content_kept,omitempty"`
	ContentReason string `json:"content_reason,omitempty"`
}

// Kept reports whether c's content was stored with the trial.
func (c *FileChange) Kept() bool { return c.ContentKept == nil || *c.ContentKept }

// OwnerChanged reports whether c moves the path's owner (BeforeUID and
// BeforeGID set and one differs from UID, GID).
func (c *FileChange) OwnerChanged() bool {
	return c.BeforeUID != nil && c.BeforeGID != nil && (*c.BeforeUID != c.UID || *c.BeforeGID != c.GID)
}

// SetBeforeOwner records uid, gid as the host's owner before c.
func (c *FileChange) SetBeforeOwner(uid, gid int) {
	c.BeforeUID, c.BeforeGID = &uid, &gid
}

// NotKept marks c's content as not stored, for reason.
func (c *FileChange) NotKept(reason string) {
	f := false
	c.ContentKept, c.ContentReason = &f, reason
}

// Exchange is one NetworkEvent with the bounded bodies and headers netsim
// kept for `dryexec show --network` (ExchangeSink's records are a JSON
// array of them). Credential header values are redacted. Headers are
// net/http's Header shape (canonical names to values) without the import,
// which the guest binary does not otherwise link.
type Exchange struct {
	NetworkEvent
	Time              time.Time           `json:"time"`
	RequestHeader     map[string][]string `json:"request_header,omitempty"`
	RequestBody       []byte              `json:"request_body,omitempty"`
	RequestTruncated  bool                `json:"request_truncated,omitempty"`
	ResponseHeader    map[string][]string `json:"response_header,omitempty"`
	ResponseBody      []byte              `json:"response_body,omitempty"`
	ResponseTruncated bool                `json:"response_truncated,omitempty"`
}

// NetworkEvent is one request that left (or tried to leave) the sandbox.
type NetworkEvent struct {
	Proto        string `json:"proto"`
	Method       string `json:"method"`
	URL          string `json:"url"`
	Host         string `json:"host"`
	Port         int    `json:"port"`
	Status       int    `json:"status"`
	Action       string `json:"action"`
	Reason       string `json:"reason"`
	BytesIn      int64  `json:"bytes_in"`
	BytesOut     int64  `json:"bytes_out"`
	SchemaBreach bool   `json:"schema_breach"`
}

// Memory is what the trial's processes wrote to memory.
type Memory struct {
	PeakRSSBytes int64  `json:"peak_rss_bytes"`
	PagesWritten int64  `json:"pages_written"`
	BytesWritten int64  `json:"bytes_written"`
	Method       string `json:"method"`
}

// Violation is one thing the boundary refused or saw. Kind is syscall, path,
// network, limit (a cgroup or storage limit was hit) or secret (a masked
// credential path was read).
type Violation struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
	PID    int    `json:"pid"`
	Exe    string `json:"exe"`
}

// The kinds of a Violation.
const (
	// ViolationSyscall: the seccomp filter refused a syscall (Detail: name and
	// key arguments).
	ViolationSyscall = "syscall"
	// ViolationLimit: a resource limit was hit (memory, pids, the upper size).
	ViolationLimit = "limit"
	// ViolationSecret: the command tried to read a masked credential path.
	ViolationSecret = "secret"
	// ViolationNetwork: the network boundary refused a connection.
	ViolationNetwork = "network"
)

// Totals sums Files.
type Totals struct {
	FilesChanged    int   `json:"files_changed"`
	FilesCreated    int   `json:"files_created"`
	FilesDeleted    int   `json:"files_deleted"`
	BytesWritten    int64 `json:"bytes_written"`
	NetworkRequests int   `json:"network_requests"`
}

// Decision is the policy's verdict on a delta.
type Decision struct {
	Choice    string   `json:"choice"`
	RiskScore float64  `json:"risk_score"`
	Reasons   []string `json:"reasons"`
}

// Receipt binds a delta to the install that produced it.
type Receipt struct {
	DeltaSHA256 string `json:"delta_sha256"`
	Signature   string `json:"signature"`
	KeyID       string `json:"key_id"`
}

// ComputeTotals fills d.Totals from d.Files and d.Network.
func (d *StateDelta) ComputeTotals() {
	var t Totals
	// A spilled delta's source is a file this process wrote: a read error
	// there leaves the totals short, and every consumer that must not accept
	// that (the policy, the receipt, the store) reads the changes again and
	// fails on it.
	_ = d.EachFile(func(f *FileChange) error {
		t.FilesChanged++
		switch f.Op {
		case OpCreate, OpSymlink, OpMkdir:
			t.FilesCreated++
		case OpDelete, OpRmdir:
			t.FilesDeleted++
		}
		if f.Op == OpCreate || f.Op == OpModify {
			// Saturating: two sparse files of 2^63-1 bytes each must not add
			// up to a negative total that a max_bytes_written limit passes.
			if f.Size > 0 && t.BytesWritten > math.MaxInt64-f.Size {
				t.BytesWritten = math.MaxInt64
			} else {
				t.BytesWritten += f.Size
			}
		}
		return nil
	})
	t.NetworkRequests = len(d.Network)
	d.Totals = t
}

// NewTrialID returns a fresh random trial id: "tr_" and 20 base32 characters.
func NewTrialID() string {
	var b [13]byte
	rand.Read(b[:])
	return "tr_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))[:20]
}
