package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/durable"
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
	// Expires is when `dryexec gc` removes it (Config.ParkTTL after Parked).
	Expires time.Time `json:"expires"`
	// Bytes is the saved state's size on disk.
	Bytes int64 `json:"bytes"`
}

// parkedLive is a session this daemon parked: its handle (its host objects'
// queue, the image it holds) kept in memory while its record is on disk.
// A park an earlier daemon left has none: its resume builds one from the
// record.
type parkedLive struct {
	info ParkedInfo
	p    *session.Parked
	l    *Live
}

// release lets go of what pl holds in this process.
func (pl *parkedLive) release() {
	pl.l.calls.close()
	if pl.l.imageRelease != nil {
		pl.l.imageRelease()
	}
}

// parkDir is where session id's complete park lives.
func (s *Service) parkDir(id string) string { return filepath.Join(parkedRoot(s.cfg.StoreDir), id) }

// pendingDir is session id's park while this daemon writes (prefix
// parkingPrefix) or resumes (resumingPrefix) it.
func (s *Service) pendingDir(prefix, id string) string {
	return filepath.Join(parkedRoot(s.cfg.StoreDir), fmt.Sprintf("%s%s-%d", prefix, id, os.Getpid()))
}

// ParkSession saves live session id to disk and ends its sandbox; it keeps
// its id, leaves the live list for the parked one, and counts against no
// session limit until resumed. The park is durable: its record (what the
// session was opened with, its cache, host objects, times) is written
// beside the saved state, so that a later daemon on the same store lists
// and resumes it. A rung that cannot park it is session.ErrParkUnsupported
// (the session goes on).
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
	if _, _, err := openParkedRoot(s.cfg.StoreDir); err != nil {
		putBack()
		return ParkedInfo{}, err
	}
	tmp := s.pendingDir(parkingPrefix, id)
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		putBack()
		return ParkedInfo{}, err
	}
	p, err := l.Session.Park(ctx, tmp)
	if err != nil {
		os.RemoveAll(tmp)
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
	files, bytes := parkFiles(tmp)
	at := p.At.UTC()
	pi := ParkedInfo{SessionID: id, Rung: info.Rung, Workspace: info.Workspace, Created: info.Created, Parked: at, Expires: at.Add(s.cfg.ParkTTL), Bytes: bytes}
	rec := &parkRecord{Version: parkRecordVersion, ParkedInfo: pi, Owner: os.Getpid(), Files: files, Objects: l.Objects, Session: p.Record()}
	dir := s.parkDir(id)
	if err = writeParkRecord(tmp, rec); err == nil {
		if err = os.Rename(tmp, dir); err == nil {
			err = durable.SyncDir(filepath.Dir(dir))
		}
	}
	if err != nil {
		// The session is parked, but only this daemon can resume it: its
		// state stays where it was written, out of other daemons' sight.
		s.cfg.Log.Warn("a parked session's record could not be written: it goes with this daemon", "session", id, "err", err)
		if _, serr := os.Stat(dir); serr != nil {
			dir = tmp
		}
	}
	p.Dir = dir
	s.state.forgetSession(id)
	s.mu.Lock()
	delete(s.sessions, id)
	s.parked[id] = &parkedLive{info: pi, p: p, l: l}
	s.mu.Unlock()
	s.cfg.Log.Info("session parked", "session", id, "bytes", pi.Bytes, "expires", pi.Expires)
	return pi, nil
}

// ParkedSessions lists the parked sessions this daemon can resume, oldest
// park first: its own and those on the store's disk that no other live
// daemon holds (an earlier daemon's).
func (s *Service) ParkedSessions() []ParkedInfo {
	out, _ := s.Parks()
	return out
}

// Parks lists the parked sessions this daemon can resume, as
// ParkedSessions, and the parks on the store's disk that cannot be
// resumed, and why (`dryexec gc` removes them). A park of this daemon whose
// directory is gone (gc removed it, expired) is let go of here.
func (s *Service) Parks() ([]ParkedInfo, []DamagedPark) {
	out := []ParkedInfo{}
	var bad []DamagedPark
	seen := map[string]bool{}
	root, ok, err := openParkedRoot(s.cfg.StoreDir)
	if err != nil {
		s.cfg.Log.Warn("listing parked sessions", "err", err)
	}
	var ents []os.DirEntry
	if ok {
		ents, _ = os.ReadDir(root)
	}
	for _, e := range ents {
		id := e.Name()
		if !validSessionID(id) {
			continue
		}
		s.mu.Lock()
		pl := s.parked[id]
		s.mu.Unlock()
		if pl != nil {
			continue // listed below
		}
		rec, err := readParkRecord(filepath.Join(root, id), id)
		if err != nil {
			bad = append(bad, DamagedPark{SessionID: id, Reason: err.Error()})
			continue
		}
		if s.heldElsewhere(rec) {
			continue
		}
		seen[id] = true
		out = append(out, rec.ParkedInfo)
	}
	s.mu.Lock()
	var gone []*parkedLive
	for id, pl := range s.parked {
		if seen[id] {
			continue
		}
		if _, err := os.Stat(pl.p.Dir); err != nil {
			delete(s.parked, id)
			gone = append(gone, pl)
			continue
		}
		out = append(out, pl.info)
	}
	s.mu.Unlock()
	for _, pl := range gone {
		pl.release()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Parked.Before(out[j].Parked) })
	return out, bad
}

// heldElsewhere says whether another live daemon on the store holds rec's
// park (a record with this process's pid is an earlier daemon's, as
// cleanLeftovers takes it).
func (s *Service) heldElsewhere(rec *parkRecord) bool {
	return rec.Owner > 0 && rec.Owner != os.Getpid() && alive(rec.Owner)
}

// ResumeSession starts parked session id again, under the same id, where it
// was parked; its saved state is removed once it runs. A park an earlier
// daemon left is resumed from its record, with a new host-call queue for
// its host objects; a damaged one is refused (ErrParkDamaged) and left for
// gc.
func (s *Service) ResumeSession(ctx context.Context, id string) (*Live, error) {
	if !validSessionID(id) {
		return nil, fmt.Errorf("%w: no parked session %q", ErrSessionNotFound, id)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the daemon is shutting down", ErrBusy)
	}
	if len(s.sessions) >= s.cfg.MaxSessions {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %d sessions are open (the limit); close one", ErrBusy, len(s.sessions))
	}
	if _, busy := s.sessions[id]; busy {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: no parked session %q", ErrSessionNotFound, id)
	}
	pl := s.parked[id]
	delete(s.parked, id)
	s.sessions[id] = nil
	s.mu.Unlock()
	unreserve := func() {
		s.mu.Lock()
		delete(s.sessions, id)
		s.mu.Unlock()
	}
	claimed, err := s.claimPark(id, pl)
	if err != nil {
		unreserve()
		if pl != nil {
			pl.release()
		}
		return nil, err
	}
	if pl == nil {
		if pl, err = s.loadParked(ctx, id, claimed); err != nil {
			// Nothing was started: the park goes back for gc to judge.
			os.Rename(claimed, s.parkDir(id))
			unreserve()
			return nil, err
		}
	}
	pl.p.Dir = claimed
	sess, err := session.Resume(ctx, pl.p)
	// The saved state is one moment of one VM: resumed, or a resume that
	// failed (it may have run it), it is not offered again.
	os.RemoveAll(claimed)
	if err != nil {
		unreserve()
		pl.release()
		return nil, err
	}
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

// claimPark moves park id out of every other daemon's sight (one rename:
// of two daemons resuming it, one wins) and returns where it now is. A
// park another live daemon holds is not this one's.
func (s *Service) claimPark(id string, pl *parkedLive) (string, error) {
	src := s.parkDir(id)
	if pl != nil {
		src = pl.p.Dir
	} else if rec, err := readParkRecord(src, id); err == nil && s.heldElsewhere(rec) {
		return "", fmt.Errorf("%w: parked session %q belongs to another running daemon (pid %d)", ErrSessionNotFound, id, rec.Owner)
	}
	root, _, err := openParkedRoot(s.cfg.StoreDir)
	if err != nil {
		return "", err
	}
	claimed := s.pendingDir(resumingPrefix, id)
	if err := os.Rename(src, claimed); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if pid := claimedBy(root, id); pid > 0 {
				return "", fmt.Errorf("%w: %q, by the daemon of pid %d", ErrParkClaimed, id, pid)
			}
			return "", fmt.Errorf("%w: no parked session %q", ErrSessionNotFound, id)
		}
		return "", err
	}
	return claimed, nil
}

// loadParked builds, from the record in dir, the host side of a park an
// earlier daemon left: its host objects served through a new queue, its
// image resolved again (the same digest or none).
func (s *Service) loadParked(ctx context.Context, id, dir string) (*parkedLive, error) {
	rec, err := readParkRecord(dir, id)
	if err != nil {
		return nil, err
	}
	q := newHostQueue(s.cfg.HostCallTimeout)
	objs := map[string]any{}
	for name := range rec.Objects {
		objs[name] = &forwarder{q: q, object: name}
	}
	b := session.ResumeBinding{GuestExe: s.cfg.GuestExe, Log: s.cfg.Log, HostObjects: objs, OwnPaths: s.ownPaths()}
	var imageRelease func()
	if img := rec.Session.Image; img != nil {
		root, rel, err := s.imageFor(ctx, img.Ref)
		if err != nil {
			q.close()
			return nil, err
		}
		b.Image, imageRelease = root, rel
	}
	p, err := session.LoadParked(dir, rec.Parked, rec.Session, b)
	if err != nil {
		q.close()
		if imageRelease != nil {
			imageRelease()
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrParkDamaged, id, err)
	}
	l := &Live{ID: id, Created: rec.Created, Objects: rec.Objects, calls: q, imageRelease: imageRelease}
	return &parkedLive{info: rec.ParkedInfo, p: p, l: l}, nil
}

// DropParked removes parked session id and its saved state.
func (s *Service) DropParked(id string) error {
	if !validSessionID(id) {
		return fmt.Errorf("%w: no parked session %q", ErrSessionNotFound, id)
	}
	s.mu.Lock()
	pl := s.parked[id]
	delete(s.parked, id)
	s.mu.Unlock()
	if pl != nil {
		pl.release()
	}
	claimed, err := s.claimPark(id, pl)
	if err != nil {
		return err
	}
	return os.RemoveAll(claimed)
}

// releaseParked lets go of this daemon's parks as it exits: each stays on
// disk, its record no longer naming this daemon, for a later daemon to
// resume; one whose record could not be written goes with the daemon.
func (s *Service) releaseParked() {
	s.mu.Lock()
	pls := make([]*parkedLive, 0, len(s.parked))
	for id, pl := range s.parked {
		pls = append(pls, pl)
		delete(s.parked, id)
	}
	s.mu.Unlock()
	for _, pl := range pls {
		pl.release()
		id := pl.info.SessionID
		if pl.p.Dir != s.parkDir(id) {
			os.RemoveAll(pl.p.Dir)
			continue
		}
		rec, err := readParkRecord(pl.p.Dir, id)
		if err == nil && rec.Owner == os.Getpid() {
			rec.Owner = 0
			err = writeParkRecord(pl.p.Dir, rec)
		}
		if err != nil {
			s.cfg.Log.Warn("releasing a parked session", "session", id, "err", err)
		}
	}
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
	parked, damaged := a.svc.Parks()
	out := map[string]any{"parked": parked}
	if len(damaged) > 0 {
		out["damaged"] = damaged
	}
	return writeJSON(w, 200, out)
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
