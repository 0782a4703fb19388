package linuxns

import (
	"os"
	"strings"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/wire"
)

// Bounds on what the guest reports about refusals and memory: it runs in the
// sandbox's namespaces, so its words are checked like any other.
const (
	maxGuestViolations = 257 // the guest's 256 plus its "n more" summary
	maxViolationDetail = 1024
	maxViolationExe    = 4096
)

// fillContainment copies the guest's seccomp violations and memory delta into
// d, bounded and cleaned.
func fillContainment(d *dryexec.StateDelta, ex *wire.TrialExit) {
	d.Violations = append(d.Violations, guestViolations(ex.Violations)...)
	if m := ex.Memory; m != nil && m.Method == "smaps_exit" && m.PagesWritten >= 0 {
		d.Memory.Method = m.Method
		d.Memory.PagesWritten = m.PagesWritten
		d.Memory.BytesWritten = m.PagesWritten * int64(os.Getpagesize())
	}
}

// guestViolations converts and bounds the guest's violations.
func guestViolations(vs []wire.Violation) []dryexec.Violation {
	if len(vs) > maxGuestViolations {
		vs = vs[:maxGuestViolations]
	}
	out := make([]dryexec.Violation, 0, len(vs))
	for _, v := range vs {
		switch v.Kind {
		case "syscall", "limit", "path", "network":
		default:
			continue
		}
		out = append(out, dryexec.Violation{Kind: v.Kind, Detail: clean(v.Detail, maxViolationDetail),
			PID: max(v.PID, 0), Exe: clean(v.Exe, maxViolationExe)})
	}
	return out
}

func clean(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
