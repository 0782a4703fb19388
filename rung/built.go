package rung

import "github.com/dryexec/dryexec"

// Built returns the names of the rungs this build implements, weakest first:
// the ones a request may name (whether this host can run them is Select's
// and Doctor's question). Interfaces that list the rungs to a client (the
// MCP tools' schemas) offer these, not the whole contract's ladder.
func Built() []string {
	return BuiltWhere(func(dryexec.Rung) bool { return true })
}

// BuiltWhere is Built, keeping only the rungs for which keep is true (keep
// sees an unconfigured instance: a type question, such as whether the rung
// holds sessions, not whether this host can run it).
func BuiltWhere(keep func(dryexec.Rung) bool) []string {
	var out []string
	for _, n := range ladder {
		if r := build(n, Config{}); r != nil && keep(r) {
			out = append(out, n)
		}
	}
	return out
}
