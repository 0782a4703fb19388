package server

import (
	"encoding/json"
	"errors"

	"github.com/dryexec/dryexec/policy"
)

// engineFor is the decision engine of a request: its own policy document
// (docs/decision.md) on top of policy.Default, else the daemon's policy. A
// document the engine refuses is the caller's mistake (400), found before
// anything runs.
func (s *Service) engineFor(doc json.RawMessage) (*policy.Engine, error) {
	if len(doc) == 0 || string(doc) == "null" {
		return s.engine, nil
	}
	p, err := policy.Parse(doc)
	if err == nil && p.Scorer != nil {
		// A scorer runs a command or calls a URL from the host, outside any
		// sandbox: a request may not bring its own.
		err = errors.New("a request's policy may not name a scorer (it would run on the host, unsandboxed); set it in the daemon's --policy")
	}
	var eng *policy.Engine
	if err == nil {
		eng, err = policy.Compile(p)
	}
	if err != nil {
		return nil, &requestError{status: 400, code: "policy", msg: "policy: " + err.Error()}
	}
	return eng, nil
}
