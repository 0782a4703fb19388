package wire

// Verbs of a session fork (package session's Session.Fork, Keep). The host
// asks the parent's guest for VerbFork: it freezes the workspace as it is
// (ns: the upper becomes a read-only layer, shared by the branches; host: a
// copy into each branch's scratch dirs; gvisor: streamed to the host as
// fork.data calls, pushed into each branch before its adopt) and answers
// Forked. Each branch's
// guest, once started, gets VerbForkAdopt: its workspace's layers, the
// parent's shell cwd and environment. VerbApplyEnd, after push_tree.begin and
// push_tree.data, writes a tree of changes over the workspace (what keep
// takes from a branch) instead of replacing it.
const (
	VerbFork      = "fork"       // body: Fork → Forked
	VerbForkAdopt = "fork.adopt" // body: ForkAdopt
	VerbApplyEnd  = "apply.end"  // body: ApplyEnd
	// VerbPullOriginDiff is pull_diff against the origin: the baseline the
	// parent had when this session was forked from it.
	VerbPullOriginDiff = "pull_diff.origin"
	// VerbForkData (guest→host, gvisor) carries a chunk of the frozen trees
	// as attachments, while the host's fork call is in flight (Fork.Stream).
	VerbForkData = "fork.data"
)

// Fork asks a session's guest to freeze its workspace for new branches.
type Fork struct {
	// N is how many branches.
	N int `json:"n"`
	// Copies (host rung, scan staging) are where the guest copies the
	// workspace for each branch: empty dirs the host made.
	Copies []ForkCopy `json:"copies,omitempty"`
	// Stream (gvisor, scan staging) asks the guest to send the workspace and
	// its baseline to the host as fork.data calls, two tar streams one after
	// the other (the workspace's first), with every other process of the
	// session stopped meanwhile: a branch is another gVisor sandbox, which
	// cannot see this one's tmpfs.
	Stream bool `json:"stream,omitempty"`
}

// ForkCopy is one branch's scratch dirs on the host rung.
type ForkCopy struct {
	Workspace string `json:"workspace"` // a copy of the workspace
	Baseline  string `json:"baseline"`  // another: the branch's baseline, the fork point
	Origin    string `json:"origin"`    // a copy of the parent's baseline
}

// Forked is the frozen state.
type Forked struct {
	// Cwd and Env are the shell's, carried to each branch.
	Cwd string   `json:"cwd"`
	Env []string `json:"env"`
	// Workspace is the parent's, as its processes see it: where a branch's
	// is elsewhere (the host rung), the cwd and environment are rewritten.
	Workspace string `json:"workspace"`
	// Layers (ns) are, for each branch, the workspace's read-only layers,
	// topmost first (the last is the bottom), each as a path relative to the
	// guest's /proc/PID on the host ("fd/9"): a detached mount of the layer
	// for that branch alone.
	Layers [][]string `json:"layers,omitempty"`
	// BaselineLayers is how many of the bottom Layers are the parent's
	// baseline (the branch's origin).
	BaselineLayers int `json:"baseline_layers,omitempty"`
	// TreeBytes and StreamBytes (Fork.Stream) are how many bytes of the
	// fork.data stream are the workspace's tar, and how many it has in all
	// (the rest is the baseline's tar).
	TreeBytes   int64 `json:"tree_bytes,omitempty"`
	StreamBytes int64 `json:"stream_bytes,omitempty"`
}

// ForkAdopt gives a branch's guest its start.
type ForkAdopt struct {
	Cwd string   `json:"cwd"`
	Env []string `json:"env"`
	// From is the parent's workspace path (Forked.Workspace).
	From string `json:"from"`
	// Layers (ns) is how many layer descriptors the host sent over the
	// guest's SessionStart.ForkFD for this adopt: those of Forked.Layers,
	// in the same order. OriginLayers is how many of the bottom ones are
	// the origin.
	Layers       int `json:"layers,omitempty"`
	OriginLayers int `json:"origin_layers,omitempty"`
	// Origin (host rung) is the dir holding the parent's baseline.
	Origin string `json:"origin,omitempty"`
	// TreeBytes (gvisor) is Forked.TreeBytes: the branch's adopt follows a
	// push of the parent's stream, whose first TreeBytes are the workspace
	// (the branch's workspace and baseline), the rest the origin.
	TreeBytes int64 `json:"tree_bytes,omitempty"`
}

// ApplyEnd ends a tree of changes pushed as push_tree.data: after Deletes
// are removed, the tree's files and symlinks are written over the workspace
// and Modes set.
type ApplyEnd struct {
	Deletes []string   `json:"deletes"`
	Modes   []DiffMode `json:"modes"`
}
