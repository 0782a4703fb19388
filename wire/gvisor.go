package wire

// The gvisor rung's two guests. The view guest (RoleGVisorView) runs on
// the host kernel, in a mount namespace of its own: it takes VerbTrialStart
// (mounts, masks, upper size) and builds the sandbox's view as the ns guest
// does, overlays whose upper dirs are on a scratch tmpfs, but does not enter
// it; it answers VerbTrialMounts, and on VerbGVisorExec writes the OCI
// bundle and execs runsc with the view as the container's root. Inside
// gVisor, the trial guest (RoleGVisorTrial) is the container's first
// process: it speaks the ns trial's verbs (VerbTrialStart, VerbTrialRun;
// VerbTrialExit, VerbTrialDone) on the descriptors below (passed in with
// runsc's --pass-fd), except that it walks nothing: the upper dirs are on
// the host side, and the host walks them itself once the sandbox is gone.
const VerbGVisorExec = "gvisor.exec"

// GVisorExec is the body of gvisor.exec: runsc's path and arguments (argv[0]
// included), the OCI runtime spec written as config.json beside the view,
// and the view guest's descriptors runsc must find open (runsc's
// --pass-fd hands them to the sandbox).
type GVisorExec struct {
	Path   string   `json:"path"`
	Argv   []string `json:"argv"`
	Config []byte   `json:"config"`
	Keep   []int    `json:"keep,omitempty"`
}

// Where, beneath the view guest's scratch tmpfs (runsc's working
// directory), runsc's own tmpfs is (GVisorRun), with the OCI bundle
// (config.json) and runsc's state (--root) in it. The container's root is
// GVisorRoot, named relative to the bundle in the spec.
const (
	GVisorRun    = "run"
	GVisorBundle = "run/bundle"
	GVisorState  = "run/state"
	GVisorRoot   = "../../root"
)

// GVisorImageGuest is where the guest binary is in the view of a gvisor
// sandbox on an image, which does not hold it: runsc starts the container's
// first process from a path in the container. The view guest binds itself
// there, onto an empty file of the view's lowest layer (the scratch one
// beneath the image), so that placing it is no change of the trial.
const GVisorImageGuest = "/.dryexec-guest"

// GVisorLogFD is where a gvisor trial guest finds runsc's log (a memfd the
// host made; runsc writes it through --debug-log): its strace of
// GVisorTracedCalls says where the command made FIFOs, which gVisor keeps
// in its own memory (TrialDone.Nodes).
const GVisorLogFD = 8

// GVisorTracedCalls are the calls runsc's strace logs for GVisorLogFD:
// every call that makes a FIFO or moves one.
const GVisorTracedCalls = "mknod,mknodat,rename,renameat,renameat2"
