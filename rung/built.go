package rung

// Built returns the names of the rungs this build implements, weakest first:
// the ones a request may name (whether this host can run them is Select's
// and Doctor's question). Interfaces that list the rungs to a client (the
// MCP tools' schemas) offer these, not the whole contract's ladder.
func Built() []string {
	var out []string
	for _, n := range ladder {
		if build(n, Config{}) != nil {
			out = append(out, n)
		}
	}
	return out
}
