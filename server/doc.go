// Package server owns the dryexec daemon (`dryexec serve`): trials and sessions
// behind a JSON HTTP API under /v1, served on a unix socket (mode 0600) or on TCP
// with a bearer token, plus the state that lets the next start clean what a
// crashed daemon left behind.
//
// Service is the daemon's core without HTTP: it runs trials (through a bounded
// queue), keeps them in the store, commits and discards them, and keeps the
// live sessions. The HTTP handler (Handler) and the MCP server (package
// mcpserver) are two faces of one Service, so a trial started either way has
// the same delta, decision and receipt as one started by `dryexec run`.
//
// Host objects of a Python SDK session live in the SDK's process: the daemon
// registers a forwarding object (session.Dispatcher) for each name, and the
// guest's calls wait in a per-session queue that the SDK drains with a
// long-poll (GET /v1/sessions/{id}/hostcalls) and answers with a POST. The
// allowlist is checked by the session (in the daemon) before a call is
// queued, and again by the SDK before it touches the object.
//
// See docs/api.md for the wire contract; openapi.json (served at
// /v1/openapi.json) is its machine-readable form, checked against the routes.
package server
