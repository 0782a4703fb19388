package conformance

// TODO(exec_python, cache, emit, host objects): another engineer adds these
// behaviours' cases here, one conformanceCase per behaviour, written against
// package session's API only, e.g.
//
//	{"python_print_captured", func(t *testing.T, open opener) { … }},
//
// They run on every rung through TestConformance like the rest.
var pythonCases = []conformanceCase{}
