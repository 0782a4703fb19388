package escape

import (
	"context"
	"regexp"
	"runtime"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/gvisor"
)

const gvisorName = gvisor.Name

// gvisorRefusal is how an attempt says the kernel refused it: the Python
// attempts print "refused NAME ERRNO", the shell ones the tool's error.
var gvisorRefusal = regexp.MustCompile(`(?m)^refused |Operation not permitted|Permission denied|not implemented|Function not implemented|Read-only file system|No such file or directory|Connection refused|Bad address|Invalid argument|Cannot fork|Resource temporarily unavailable`)

// gvisorRefused: on gvisor a refusal is gVisor's kernel answering with an
// error, which it does not record as a violation (no seccomp supervisor
// reports it, docs/architecture.md "The gvisor rung"): the attempt's own
// output is the record.
func gvisorRefused(d *dryexec.StateDelta) bool {
	return gvisorRefusal.MatchString(d.Process.Stdout + d.Process.Stderr)
}

// TestEscapeGVisor runs the escape corpus on the gvisor rung: the host must
// be unchanged and no attempt may report success; each refusal must be on
// record, as ns records it (a violation, a file in the delta, a timeout) or
// as the error the attempt met.
func TestEscapeGVisor(t *testing.T) {
	testreq.NeedRoot(t)
	testreq.Need(t, testreq.GVisor, (&gvisor.Rung{}).Available(context.Background()))
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			if a.amd64 && runtime.GOARCH != "amd64" {
				t.Skip("uses amd64 syscall numbers")
			}
			runOn(t, &gvisor.Rung{}, a)
		})
	}
}

// gvisorUnrecorded are the attempts whose refusal gvisor does not record,
// and why; (a) and (b) still hold for them. Everything else the corpus
// tries is refused on gvisor as on ns: the command runs under ns's seccomp
// profile there too, with no_new_privs.
var gvisorUnrecorded = map[string]string{
	"fork_bomb": "the pids limit is the command's RLIMIT_NPROC inside gVisor (the sandbox's processes are not the host's), " +
		"whose hits are not recorded, as under ns's rlimit fallback; rung/gvisor's TestPidsLimit checks that it holds",
}
