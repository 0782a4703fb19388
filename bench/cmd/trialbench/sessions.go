//go:build linux

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/dryexec/dryexec/session"
)

// benchSessions are the long-lived sessions the session benchmarks reuse, one
// per rung, plus one per rung whose workspace holds a large tree.
type benchSessions struct {
	plain, big map[string]*session.Session
}

func openSessions(ctx context.Context, tree string) (*benchSessions, func(), error) {
	bs := &benchSessions{plain: map[string]*session.Session{}, big: map[string]*session.Session{}}
	closeAll := func() {
		for _, m := range []map[string]*session.Session{bs.plain, bs.big} {
			for _, s := range m {
				s.Close()
			}
		}
	}
	for _, rung := range []string{"host", "ns"} {
		s, err := session.Open(ctx, session.Options{Rung: rung})
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("%s session: %w", rung, err)
		}
		bs.plain[rung] = s
		s, err = session.Open(ctx, session.Options{Rung: rung})
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("%s session: %w", rung, err)
		}
		bs.big[rung] = s
		if err := s.PushDir(ctx, tree); err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("pushing %s: %w", tree, err)
		}
	}
	return bs, closeAll, nil
}

// sessionGroup: session start, exec_shell and exec_python round trips, and
// a diff of one change in a large workspace, on the host and ns rungs,
// against fork+exec of sh -c true.
func sessionGroup(e *env) ([]group, error) {
	tree, err := e.tree(e.cfg.tree)
	if err != nil {
		return nil, err
	}
	bs, closeAll, err := openSessions(e.ctx, tree)
	if err != nil {
		return nil, err
	}
	return []group{{key: "sessions", title: "Sessions", unit: unitMS, bases: []int{0}, close: closeAll,
		cands: sessionCandidates(e.ctx, bs, e.cfg.tree, e.command(e.empty, "sh", "-c", "true"))}}, nil
}

func sessionCandidates(ctx context.Context, bs *benchSessions, treeFiles int, forkExec func() error) []candidate {
	shell := func(s *session.Session, c string) error {
		r, err := s.Shell(ctx, c, time.Minute)
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("%q: exit %d: %s", c, r.ExitCode, r.Transcript)
		}
		return err
	}
	var out []candidate
	out = append(out, candidate{name: "fork+exec sh -c true (baseline)", run: timed(forkExec)})
	for _, rung := range []string{"host", "ns"} {
		out = append(out,
			candidate{name: rung + ": session start → first exec_shell(true) → close", run: timed(func() error {
				s, err := session.Open(ctx, session.Options{Rung: rung})
				if err != nil {
					return err
				}
				defer s.Close()
				return shell(s, "true")
			})},
			candidate{name: rung + ": exec_shell(true) round trip", run: timed(func() error { return shell(bs.plain[rung], "true") })},
			candidate{name: rung + ": exec_python(1+1) round trip", run: timed(func() error {
				r, err := bs.plain[rung].Python(ctx, "1+1", nil, time.Minute)
				if err == nil && !r.OK {
					err = fmt.Errorf("python: %+v", r.Error)
				}
				return err
			})},
			candidate{name: fmt.Sprintf("%s: diff, 1 change in a %d-file workspace", rung, treeFiles), run: timed(func() error {
				if err := shell(bs.big[rung], "echo $RANDOM > d0/f0"); err != nil {
					return err
				}
				d, err := bs.big[rung].Diff(ctx, false)
				if err == nil && len(d.Writes) != 1 {
					err = fmt.Errorf("diff has %d writes", len(d.Writes))
				}
				return err
			})},
		)
	}
	return out
}
