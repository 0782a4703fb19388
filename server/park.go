package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/session"
)

// ParkedInfo describes a parked session: its saved state on disk under
// the store (parked/<id>), no process or memory held.
type ParkedInfo struct {
	SessionID string    `json:"session_id"`
	Rung      string    `json:"rung"`
	Workspace string    `json:"workspace"`
	Created   time.Time `json:"created"`
	Parked    time.Time `json:"parked"`
	// Bytes is the saved state's size on disk.
	Bytes int64 `json:"bytes"`
}

// parkedLive is a parked session this daemon can resume: the session's
// handle (its options, cache and host objects, which live in this
// process) and the Live's own fields.
type parkedLive struct {
	info ParkedInfo
	p    *session.Parked
	l    *Live
}

// parkDir is where session id's saved state lives.
func (s *Service) parkDir(id string) string { return filepath.Join(s.cfg.StoreDir, "parked", id) }

// ParkSession saves live session id to disk and ends its sandbox; it keeps
// its id, leaves the live list for the parked one, and counts against no
// session limit until resumed. A rung that cannot park it is
// session.ErrParkUnsupported (the session goes on).
func (s *Service) ParkSession(ctx context.Context, id string) (ParkedInfo, error) {
	s.mu.Lock()
	l := s.sessions[id]
	if l != nil {
		// Reserved: no request reaches it while it parks.
		s.sessions[id] = nil
	}
	s.mu.Unlock()
	if l == nil {
		return ParkedInfo{}, fmt.Errorf("%w: %q", ErrSessionNotFound, id)
	}
	putBack := func() {
		s.mu.Lock()
		s.sessions[id] = l
		s.mu.Unlock()
	}
	info := l.Info()
	dir := s.parkDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		putBack()
		return ParkedInfo{}, err
	}
	p, err := l.Session.Park(ctx, dir)
	if err != nil {
		os.RemoveAll(dir)
		if errors.Is(err, dryexec.ErrSessionLost) {
			s.mu.Lock()
			delete(s.sessions, id)
			s.mu.Unlock()
			s.closeLive(l)
		} else {
			putBack()
		}
		return ParkedInfo{}, err
	}
	pi := ParkedInfo{SessionID: id, Rung: info.Rung, Workspace: info.Workspace, Created: info.Created, Parked: p.At.UTC(), Bytes: dirSize(dir)}
	if b, err := json.Marshal(pi); err == nil {
		// What gc and a later daemon read: the state is this daemon's to
		// resume (the session's host side lives in its process).
		os.WriteFile(filepath.Join(dir, "parked.json"), b, 0o600)
	}
	s.state.forgetSession(id)
	s.mu.Lock()
	delete(s.sessions, id)
	s.parked[id] = &parkedLive{info: pi, p: p, l: l}
	s.mu.Unlock()
	s.cfg.Log.Info("session parked", "session", id, "bytes", pi.Bytes)
	return pi, nil
}

// ParkedSessions lists the parked sessions this daemon can resume, oldest
// park first.
func (s *Service) ParkedSessions() []ParkedInfo {
	s.mu.Lock()
	out := make([]ParkedInfo, 0, len(s.parked))
	for _, p := range s.parked {
		out = append(out, p.info)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Parked.Before(out[j].Parked) })
	return out
}

// ResumeSession starts parked session id again, under the same id, where it
// was parked; its saved state is removed once it runs.
func (s *Service) ResumeSession(ctx context.Context, id string) (*Live, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the daemon is shutting down", ErrBusy)
	}
	pl := s.parked[id]
	if pl != nil && len(s.sessions) >= s.cfg.MaxSessions {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %d sessions are open (the limit); close one", ErrBusy, len(s.sessions))
	}
	if pl != nil {
		delete(s.parked, id)
		s.sessions[id] = nil
	}
	s.mu.Unlock()
	if pl == nil {
		return nil, fmt.Errorf("%w: no parked session %q", ErrSessionNotFound, id)
	}
	sess, err := session.Resume(ctx, pl.p)
	if err != nil {
		// The saved state is one moment of one VM: a resume that failed
		// may have run it, so it is not offered again.
		s.mu.Lock()
		delete(s.sessions, id)
		s.mu.Unlock()
		os.RemoveAll(s.parkDir(id))
		pl.l.calls.close()
		if pl.l.imageRelease != nil {
			pl.l.imageRelease()
		}
		return nil, err
	}
	os.RemoveAll(s.parkDir(id))
	old := pl.l
	l := &Live{ID: id, Session: sess, Created: old.Created, Objects: old.Objects, calls: old.calls, used: time.Now(), imageRelease: old.imageRelease, parent: old.parent}
	if err := s.state.recordSession(id, sess.Info()); err != nil {
		s.cfg.Log.Warn("recording a session for crash cleanup", "session", id, "err", err)
	}
	s.mu.Lock()
	s.sessions[id] = l
	s.mu.Unlock()
	s.cfg.Log.Info("session resumed", "session", id)
	return l, nil
}

// DropParked removes parked session id and its saved state.
func (s *Service) DropParked(id string) error {
	s.mu.Lock()
	pl := s.parked[id]
	delete(s.parked, id)
	s.mu.Unlock()
	if pl == nil {
		return fmt.Errorf("%w: no parked session %q", ErrSessionNotFound, id)
	}
	pl.l.calls.close()
	if pl.l.imageRelease != nil {
		pl.l.imageRelease()
	}
	return os.RemoveAll(s.parkDir(id))
}

// GCParked removes saved states under the store that no parked session of
// this daemon owns: an earlier daemon's (its parked sessions' host side,
// cache and host objects, went with its process) or a park interrupted
// midway. It returns how many it removed.
func (s *Service) GCParked() (int, error) {
	root := filepath.Join(s.cfg.StoreDir, "parked")
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		s.mu.Lock()
		_, ours := s.parked[e.Name()]
		_, parking := s.sessions[e.Name()]
		s.mu.Unlock()
		if ours || parking {
			continue
		}
		if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// dirSize is the bytes of the regular files directly in dir.
func dirSize(dir string) int64 {
	ents, _ := os.ReadDir(dir)
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

func (a *api) parkSession(w http.ResponseWriter, r *http.Request) error {
	if _, err := a.live(r); err != nil {
		return err
	}
	pi, err := a.svc.ParkSession(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, 200, pi)
}

func (a *api) listParked(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, 200, map[string]any{"parked": a.svc.ParkedSessions()})
}

func (a *api) resumeSession(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if !validSessionID(id) {
		return badRequest("%q is not a session id (se_ and 20 letters or digits)", id)
	}
	l, err := a.svc.ResumeSession(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, 200, l.Info())
}

func (a *api) dropParked(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if !validSessionID(id) {
		return badRequest("%q is not a session id (se_ and 20 letters or digits)", id)
	}
	if err := a.svc.DropParked(id); err != nil {
		return err
	}
	return writeJSON(w, 200, map[string]any{"session_id": id, "dropped": true})
}
