// Package host owns the `host` rung: no isolation at all. A one-shot trial
// runs its command on a scratch copy of the working directory and reports
// the copy's changes against the original as its delta; a session's guest
// supervisor runs as a plain subprocess over a workspace in a scratch dir.
// Nothing stands between the command and the host: it sees the host's
// files, network, processes and credentials, and what it writes outside the
// copy lands on the host and is in no delta. It exists for speed and for the
// conformance corpus, is always labelled "no isolation", and rung.Open's
// "best" never picks it.
package host
