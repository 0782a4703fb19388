package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/dryexec/dryexec/compare"
	"github.com/dryexec/dryexec/session"
)

// ForkRequest asks for n branches of a session (1 to session.MaxForkBranches;
// 0 means 1).
type ForkRequest struct {
	N int `json:"n,omitempty"`
}

// ForkResponse lists the new branches, each a live session of its own.
type ForkResponse struct {
	SessionID string        `json:"session_id"`
	Sessions  []SessionInfo `json:"sessions"`
}

// KeepRequest names the branch whose changes the parent takes.
type KeepRequest struct {
	Branch string `json:"branch"`
}

// KeepResponse says which branch was kept and which were discarded (closed).
type KeepResponse struct {
	SessionID string   `json:"session_id"`
	Kept      string   `json:"kept"`
	Discarded []string `json:"discarded"`
}

// CompareRequest lists what to compare: stored trial ids (tr_…) and live
// session ids (se_…, compared by their diffs), two or more.
type CompareRequest struct {
	IDs []string `json:"ids"`
}

const maxCompare = 16

// ForkSession forks live session id into n branches, each registered as a
// live session. A branch's host objects are the parent's: their calls are
// queued on the parent's host calls.
func (s *Service) ForkSession(ctx context.Context, id string, n int) ([]*Live, error) {
	if n == 0 {
		n = 1
	}
	if n < 0 || n > session.MaxForkBranches {
		return nil, badRequest("n: between 1 and %d", session.MaxForkBranches)
	}
	parent, err := s.Session(id)
	if err != nil {
		return nil, err
	}
	// Reserve the slots while the sandboxes start.
	ids := make([]string, n)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the daemon is shutting down", ErrBusy)
	}
	if len(s.sessions)+n > s.cfg.MaxSessions {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %d sessions are open and the limit is %d: %d branches do not fit", ErrBusy, len(s.sessions), s.cfg.MaxSessions, n)
	}
	for i := range ids {
		ids[i] = newSessionID()
		s.sessions[ids[i]] = nil
	}
	s.mu.Unlock()
	bs, err := parent.Session.Fork(ctx, n)
	if err != nil {
		s.mu.Lock()
		for _, id := range ids {
			delete(s.sessions, id)
		}
		s.mu.Unlock()
		return nil, err
	}
	out := make([]*Live, n)
	for i, b := range bs {
		out[i] = &Live{ID: ids[i], Session: b, Created: time.Now(), Objects: parent.Objects, calls: newHostQueue(s.cfg.HostCallTimeout),
			used: time.Now(), parent: parent.ID}
		if err := s.state.recordSession(ids[i], b.Info()); err != nil {
			s.cfg.Log.Warn("recording a session for crash cleanup", "session", ids[i], "err", err)
		}
	}
	s.mu.Lock()
	closed := s.closed
	if !closed {
		for _, l := range out {
			s.sessions[l.ID] = l
		}
	}
	s.mu.Unlock()
	if closed {
		for _, l := range out {
			s.closeLive(l)
		}
		return nil, fmt.Errorf("%w: the daemon is shutting down", ErrBusy)
	}
	s.cfg.Log.Info("session forked", "session", id, "branches", ids)
	return out, nil
}

// KeepBranch makes branch's changes session id's and discards every branch
// of that fork (session.Session.Keep).
func (s *Service) KeepBranch(ctx context.Context, id, branch string) (*KeepResponse, error) {
	if !validSessionID(branch) {
		return nil, badRequest("branch: %q is not a session id", branch)
	}
	parent, err := s.Session(id)
	if err != nil {
		return nil, err
	}
	b, err := s.Session(branch)
	if err != nil {
		return nil, err
	}
	if err := parent.Session.Keep(ctx, b.Session); err != nil {
		if errors.Is(err, session.ErrNotBranch) {
			return nil, badRequest("%v: %s is not a live branch of %s", err, branch, id)
		}
		return nil, err
	}
	resp := &KeepResponse{SessionID: id, Kept: branch, Discarded: []string{}}
	// The branches Keep ended leave the daemon's list.
	s.mu.Lock()
	var gone []*Live
	for lid, l := range s.sessions {
		if l != nil && l.parent == id && l.Session.Discarded() {
			delete(s.sessions, lid)
			gone = append(gone, l)
		}
	}
	s.mu.Unlock()
	for _, l := range gone {
		s.closeLive(l)
		if l.ID != branch {
			resp.Discarded = append(resp.Discarded, l.ID)
		}
	}
	return resp, nil
}

// Compare compares stored trials and live sessions side by side.
func (s *Service) Compare(ctx context.Context, ids []string) (*compare.Result, error) {
	if len(ids) < 2 || len(ids) > maxCompare {
		return nil, badRequest("ids: between 2 and %d trial or session ids", maxCompare)
	}
	var sides []compare.Side
	for _, id := range ids {
		switch {
		case strings.HasPrefix(id, "se_"):
			l, err := s.Session(id)
			if err != nil {
				return nil, err
			}
			r, err := session.Compare(ctx, []string{id}, l.Session)
			if err != nil {
				return nil, err
			}
			sides = append(sides, r.Sides[0])
		default:
			d, _, err := s.Trial(id)
			if err != nil {
				return nil, err
			}
			side, err := compare.FromDelta(d)
			if err != nil {
				return nil, err
			}
			sides = append(sides, side)
		}
	}
	return compare.Compare(sides...), nil
}

func (a *api) forkSession(w http.ResponseWriter, r *http.Request) error {
	if _, err := a.live(r); err != nil {
		return err
	}
	var req ForkRequest
	if err := a.decode(w, r, &req, true); err != nil {
		return err
	}
	ls, err := a.svc.ForkSession(r.Context(), r.PathValue("id"), req.N)
	if err != nil {
		return err
	}
	resp := ForkResponse{SessionID: r.PathValue("id"), Sessions: []SessionInfo{}}
	for _, l := range ls {
		resp.Sessions = append(resp.Sessions, l.Info())
	}
	return writeJSON(w, http.StatusCreated, resp)
}

func (a *api) keepBranch(w http.ResponseWriter, r *http.Request) error {
	if _, err := a.live(r); err != nil {
		return err
	}
	var req KeepRequest
	if err := a.decode(w, r, &req, false); err != nil {
		return err
	}
	resp, err := a.svc.KeepBranch(r.Context(), r.PathValue("id"), req.Branch)
	if err != nil {
		return err
	}
	return writeJSON(w, 200, resp)
}

func (a *api) compare(w http.ResponseWriter, r *http.Request) error {
	var req CompareRequest
	if err := a.decode(w, r, &req, false); err != nil {
		return err
	}
	res, err := a.svc.Compare(r.Context(), req.IDs)
	if err != nil {
		return err
	}
	return writeJSON(w, 200, res)
}
