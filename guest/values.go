package guest

import (
	"strings"

	"github.com/dryexec/dryexec/wire"
)

// Hard ceilings of an exec's caps (wire.Caps): a larger one is lowered.
const (
	capEntryCeiling = 1 << 20
	capTotalCeiling = 64 << 20
)

// printCaps are an exec's print caps: its own (within the ceilings) or the
// defaults.
func printCaps(c *wire.Caps) (entry, total int) {
	entry, total = printEntryMax, printTotalMax
	if c != nil && c.Entry > 0 {
		entry = min(c.Entry, capEntryCeiling)
	}
	if c != nil && c.Total > 0 {
		total = min(c.Total, capTotalCeiling)
	}
	return entry, total
}

// shellCap is a shell exec's transcript and stream cap.
func shellCap(sessionCap int, c *wire.Caps) int {
	if c != nil && c.Total > 0 {
		return min(c.Total, capTotalCeiling)
	}
	return sessionCap
}

// capTranscript keeps the transcript's tail within the exec's caps.Total, the
// marker first when something was dropped. Without caps the session's
// OutputCap (applied as the runner wrote) is all there is.
func capTranscript(t string, c *wire.Caps) string {
	if c == nil || c.Total <= 0 || len(t) <= c.Total {
		return t
	}
	return markHead(clipTail(t, c.Total))
}

// markHead puts the marker before a tail whose head was dropped.
func markHead(s string) string { return wire.CapsMarker + "\n" + s }

// markDropped leaves a visible entry where an exec with caps had whole print
// entries dropped.
func (x *pyExec) markDropped() {
	if x.marked && x.dropped > 0 {
		x.prints = append(x.prints, wire.PrintEntry{Kind: "dropped", Type: "", Text: wire.CapsMarker, Len: x.dropped})
	}
}

// printObjects checks the runner's description of the printed objects: it is
// the user's process, so everything is bounded again here.
func printObjects(in []wire.PrintObject) []wire.PrintObject {
	if len(in) == 0 {
		return nil
	}
	out := make([]wire.PrintObject, 0, min(len(in), wire.MaxPrintObjects))
	for _, o := range in[:min(len(in), wire.MaxPrintObjects)] {
		r := o.Repr
		trunc := o.Truncated
		if len(r) > wire.PrintReprMax {
			r, trunc = clipHead(r, wire.PrintReprMax), true
		}
		p := wire.PrintObject{Type: clipHead(strings.ToValidUTF8(o.Type, "?"), 256), Repr: r, Truncated: trunc}
		if o.Len != nil && *o.Len >= 0 {
			n := *o.Len
			p.Len = &n
		}
		out = append(out, p)
	}
	return out
}
