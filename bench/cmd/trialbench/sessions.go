//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dryexec/dryexec/session"
)

// benchSessions are the long-lived sessions the session benchmarks reuse, one
// per rung, plus one per rung whose workspace holds a large tree.
type benchSessions struct {
	plain, big map[string]*session.Session
}

func openSessions(ctx context.Context, treeFiles int) (*benchSessions, func(), error) {
	bs := &benchSessions{plain: map[string]*session.Session{}, big: map[string]*session.Session{}}
	closeAll := func() {
		for _, m := range []map[string]*session.Session{bs.plain, bs.big} {
			for _, s := range m {
				s.Close()
			}
		}
	}
	tree, err := os.MkdirTemp("", "sessionbench-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tree)
	if err := makeTree(filepath.Join(tree, "t"), treeFiles); err != nil {
		return nil, nil, err
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
		if err := s.PushDir(ctx, filepath.Join(tree, "t")); err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("pushing %d files: %w", treeFiles, err)
		}
	}
	return bs, closeAll, nil
}

func sessionCandidates(ctx context.Context, bs *benchSessions, treeFiles int, runCmd func(argv ...string) error) []candidate {
	shell := func(s *session.Session, c string) error {
		r, err := s.Shell(ctx, c, time.Minute)
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("%q: exit %d: %s", c, r.ExitCode, r.Transcript)
		}
		return err
	}
	var out []candidate
	out = append(out, candidate{"fork+exec sh -c true (baseline)", func() error { return runCmd("sh", "-c", "true") }})
	for _, rung := range []string{"host", "ns"} {
		out = append(out,
			candidate{rung + ": session start → first exec_shell(true) → close", func() error {
				s, err := session.Open(ctx, session.Options{Rung: rung})
				if err != nil {
					return err
				}
				defer s.Close()
				return shell(s, "true")
			}},
			candidate{rung + ": exec_shell(true) round trip", func() error { return shell(bs.plain[rung], "true") }},
			candidate{rung + ": exec_python(1+1) round trip", func() error {
				r, err := bs.plain[rung].Python(ctx, "1+1", nil, time.Minute)
				if err == nil && !r.OK {
					err = fmt.Errorf("python: %+v", r.Error)
				}
				return err
			}},
			candidate{fmt.Sprintf("%s: diff, 1 change in a %d-file workspace", rung, treeFiles), func() error {
				if err := shell(bs.big[rung], "echo $RANDOM > d0/f0"); err != nil {
					return err
				}
				d, err := bs.big[rung].Diff(ctx, false)
				if err == nil && len(d.Writes) != 1 {
					err = fmt.Errorf("diff has %d writes", len(d.Writes))
				}
				return err
			}},
		)
	}
	return out
}
