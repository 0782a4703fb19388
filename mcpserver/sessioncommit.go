package mcpserver

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/receipt"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/session"
)

// A session's changes reach the host the way every change does: as a trial.
// session_commit runs, in a trial over the seed directory, a shell script
// that writes the session's files (a tar stream on its stdin), deletes and
// chmods what the session did; the trial is stored, decided by the policy
// and signed like any other, and committed through Service.Commit, with its
// conflict checks and journal. So a session commit is as reviewable
// (show_trial) and as refusable (a blocked decision, a host that moved) as
// commit_trial, and no second way of writing to the host exists.

// maxCommitTar bounds the content one session_commit carries: the trial's
// stdin, which the service takes up to 64 MiB (held in memory, as the
// session's diff already is); maxCommitScript keeps the
// script's deletes and chmods under Linux's 128 KiB limit on one argument.
const (
	maxCommitTar    = 64 << 20
	maxCommitScript = 96 << 10
)

// seed is the host directory a session's workspace was copied from, as it
// was then: for each path relative to it, its kind, content hash and mode.
type seed struct {
	dir      string
	uid, gid int
	files    map[string]string
}

// snapshot records dir for seed: every file, symlink and directory beneath.
func snapshot(dir string) (*seed, error) {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != strings.TrimSuffix(dir, "/") && filepath.Clean(dir) != dir {
		return nil, &ArgumentError{Tool: "session_open", Arg: "seed_dir", Msg: fmt.Sprintf("is %q: want a clean absolute host directory", dir)}
	}
	dir = filepath.Clean(dir)
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return nil, &ArgumentError{Tool: "session_open", Arg: "seed_dir", Msg: fmt.Sprintf("is %q: not a directory on the host", dir)}
	}
	sd := &seed{dir: dir, files: map[string]string{}}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		sd.uid, sd.gid = int(st.Uid), int(st.Gid)
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		sd.files[rel] = hostState(dir, rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading seed_dir %s: %w", dir, err)
	}
	return sd, nil
}

// hostState is what dir/rel is on the host now, as one comparable string;
// "" when it does not exist.
func hostState(dir, rel string) string {
	p := filepath.Join(dir, rel)
	fi, err := os.Lstat(p)
	switch {
	case err != nil:
		return ""
	case fi.Mode()&fs.ModeSymlink != 0:
		t, _ := os.Readlink(p)
		return "link " + t
	case fi.IsDir():
		return "dir"
	case !fi.Mode().IsRegular():
		return "special " + fi.Mode().String()
	}
	f, err := os.Open(p)
	if err != nil {
		return "unreadable " + err.Error()
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "unreadable " + err.Error()
	}
	return fmt.Sprintf("file %s %04o", hex.EncodeToString(h.Sum(nil)), fi.Mode().Perm())
}

func (t *tools) sessionCommit(ctx context.Context, _ *mcp.CallToolRequest, in SessionCommitIn) (string, SessionCommitOut, error) {
	if err := checkRelPaths("session_commit", in.Paths); err != nil {
		return "", SessionCommitOut{}, err
	}
	if err := t.checkForce(in.Force, "its operator may restart it with --allow-force"); err != nil {
		return "", SessionCommitOut{}, err
	}
	if d, err := hex.DecodeString(in.ExpectDigest); in.ExpectDigest != "" && (err != nil || len(d) != sha256.Size || hex.EncodeToString(d) != in.ExpectDigest) {
		return "", SessionCommitOut{}, &ArgumentError{Tool: "session_commit", Arg: "expect_digest", Msg: fmt.Sprintf("is %q: want the 64 lower-case hex digits of session_diff's digest", in.ExpectDigest)}
	}
	l, err := t.svc.Session(in.SessionID)
	if err != nil {
		return "", SessionCommitOut{}, err
	}
	sd := t.seedOf(in.SessionID)
	if sd == nil {
		return "", SessionCommitOut{}, fmt.Errorf("session %s was not opened with seed_dir, so it has no host directory to commit to; session_diff shows its changes", in.SessionID)
	}
	d, err := l.Session.Diff(ctx, false)
	if err != nil {
		return "", SessionCommitOut{}, err
	}
	sel := selectDiff(d, in.Paths)
	writes, links, deletes, chmods := sel.writes, sel.links, sel.deletes, sel.chmods
	all := slices.Concat(writes, links, deletes, chmods)
	if in.ExpectDigest != "" {
		// What is committed below is d, in memory: checked here, it is
		// what the reviewer saw, whatever the workspace does next.
		got, err := diffDigest(d, sel)
		if err != nil {
			return "", SessionCommitOut{}, err
		}
		if got != in.ExpectDigest {
			return "", SessionCommitOut{}, &UnreviewedDiffError{SessionID: in.SessionID, Expected: in.ExpectDigest, Actual: got, Paths: all}
		}
	}
	if len(all) == 0 {
		if len(in.Paths) > 0 {
			return "", SessionCommitOut{}, fmt.Errorf("session %s changed nothing at or beneath %s; session_diff lists what it changed", in.SessionID, strings.Join(in.Paths, ", "))
		}
		return "", SessionCommitOut{}, fmt.Errorf("session %s has no changes to commit", in.SessionID)
	}
	for _, p := range all {
		// The guest reports these paths: one that would leave the seed
		// directory is refused whole, not cleaned.
		if !filepath.IsLocal(p) {
			return "", SessionCommitOut{}, fmt.Errorf("the session reported the path %q, outside its workspace; nothing was committed", p)
		}
	}
	if !in.Force {
		var moved []string
		for _, p := range all {
			if hostState(sd.dir, p) != t.seededState(sd, p) {
				moved = append(moved, p)
			}
		}
		if len(moved) > 0 {
			return "", SessionCommitOut{}, fmt.Errorf("%w: the host changed since the session was seeded at %s: %s; nothing was committed (compare with session_diff; a person may decide to overwrite with force)",
				dryexec.ErrCommitRefused, strings.Join(moved, ", "), sd.dir)
		}
	}
	tarball, err := commitTar(sd, d.Writes, d.Links, d.Modes, writes, links)
	if err != nil {
		return "", SessionCommitOut{}, err
	}
	script := commitScript(deletes, chmods, d.Modes)
	if len(script) > maxCommitScript {
		return "", SessionCommitOut{}, fmt.Errorf("the session deletes or chmods too many paths for one session_commit (%d bytes of script, at most %d): commit in parts with paths", len(script), maxCommitScript)
	}
	dt, err := t.svc.RunTrial(ctx, server.TrialRequest{Argv: []string{"/bin/sh", "-c", script}, Cwd: sd.dir, Stdin: &tarball,
		TimeoutMS: (10 * time.Minute).Milliseconds()}, server.TrialHooks{})
	if err != nil {
		return "", SessionCommitOut{}, fmt.Errorf("recording the session's changes as a trial: %w", err)
	}
	if dt.Process.ExitCode != 0 || dt.Process.TimedOut {
		t.svc.Discard(dt.TrialID)
		return "", SessionCommitOut{}, fmt.Errorf("applying the session's changes in a trial failed (exit %d): %s; nothing was committed", dt.Process.ExitCode, clip(dt.Process.Stderr))
	}
	var outside []string
	dt.EachFile(func(f *dryexec.FileChange) error {
		if f.Path != sd.dir && !strings.HasPrefix(f.Path, sd.dir+"/") {
			outside = append(outside, f.Path)
		}
		return nil
	})
	if len(outside) > 0 {
		t.svc.Discard(dt.TrialID)
		return "", SessionCommitOut{}, fmt.Errorf("the session's changes reach outside %s (%s); nothing was committed", sd.dir, strings.Join(outside, ", "))
	}
	out := SessionCommitOut{SessionID: in.SessionID, TrialID: dt.TrialID, Decision: decisionOut(dt.Decision)}
	applied, err := t.svc.Commit(ctx, dt.TrialID, server.CommitRequest{Force: in.Force, By: "mcp"})
	if err != nil {
		// The trial stays: what was refused can be looked at, and a
		// person may still commit or drop it.
		return "", SessionCommitOut{}, fmt.Errorf("%w; nothing was committed: the changes are kept as trial %s (show_trial shows them, discard_trial drops them)", err, dt.TrialID)
	}
	out.Applied = changeLines(applied)
	t.mu.Lock()
	for _, f := range applied {
		if rel, err := filepath.Rel(sd.dir, f.Path); err == nil && filepath.IsLocal(rel) {
			sd.files[rel] = hostState(sd.dir, rel)
		}
	}
	t.mu.Unlock()
	if len(in.Paths) == 0 {
		// Everything is on the host now: the next diff starts from here,
		// unless the workspace moved since d (a daemon the session left).
		if err := l.Session.Rebase(ctx, d); err != nil {
			return "", SessionCommitOut{}, fmt.Errorf("committed as trial %s, but rebasing the session failed: %w", dt.TrialID, err)
		}
	}
	return fmt.Sprintf("committed session %s to %s as trial %s (%s): %d change(s) applied\n%s", in.SessionID, sd.dir, dt.TrialID,
		dt.Decision.Choice, len(applied), strings.Join(out.Applied, "\n")), out, nil
}

func (t *tools) seededState(sd *seed, rel string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return sd.files[rel]
}

// commitTar is the tar stream of the session's written files and symlinks,
// each owned as the host path it replaces (a new one as the seed directory),
// preceded by the directories they need that the host lacks.
func commitTar(sd *seed, contents map[string][]byte, targets map[string]string, modes map[string]fs.FileMode, writes, links []string) (string, error) {
	owner := func(rel string) (int, int) {
		if fi, err := os.Lstat(filepath.Join(sd.dir, rel)); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				return int(st.Uid), int(st.Gid)
			}
		}
		return sd.uid, sd.gid
	}
	now := time.Now()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	dirs := map[string]bool{}
	for _, p := range slices.Concat(writes, links) {
		for dir := filepath.Dir(p); dir != "."; dir = filepath.Dir(dir) {
			if _, err := os.Lstat(filepath.Join(sd.dir, dir)); errors.Is(err, fs.ErrNotExist) {
				dirs[dir] = true
			}
		}
	}
	for _, dir := range slices.Sorted(maps.Keys(dirs)) { // a parent sorts before its children
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, Uid: sd.uid, Gid: sd.gid, ModTime: now}); err != nil {
			return "", err
		}
	}
	for _, p := range writes {
		uid, gid := owner(p)
		mode := int64(0o644)
		if m, ok := modes[p]; ok {
			mode = int64(m.Perm())
		}
		c := contents[p]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(c)), Uid: uid, Gid: gid, ModTime: now}); err != nil {
			return "", err
		}
		if _, err := tw.Write(c); err != nil {
			return "", err
		}
		if b.Len() > maxCommitTar {
			return "", fmt.Errorf("the session's changes are over %d MiB: commit in parts with paths", maxCommitTar>>20)
		}
	}
	for _, p := range links {
		uid, gid := owner(p)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: targets[p], Mode: 0o777, Uid: uid, Gid: gid, ModTime: now}); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if b.Len() > maxCommitTar {
		return "", fmt.Errorf("the session's changes are over %d MiB: commit in parts with paths", maxCommitTar>>20)
	}
	return b.String(), nil
}

// commitScript deletes, extracts the tar on stdin and chmods, in the trial's
// cwd (the seed directory). It fails on the first error, so that a trial
// that did part of the work is never committed.
func commitScript(deletes, chmods []string, modes map[string]fs.FileMode) string {
	var b strings.Builder
	b.WriteString("set -eu\n")
	if len(deletes) > 0 {
		b.WriteString("rm -f --")
		for _, p := range deletes {
			b.WriteString(" " + shellQuote(p))
		}
		b.WriteString("\n")
	}
	// As root, each file gets the owner the tar names (the host path's);
	// otherwise whoever runs the trial owns what it writes.
	owner := "--no-same-owner"
	if os.Geteuid() == 0 {
		owner = "--same-owner --numeric-owner"
	}
	b.WriteString("tar -x -p " + owner + " -f -\n")
	for _, p := range chmods {
		fmt.Fprintf(&b, "chmod %04o -- %s\n", modes[p].Perm(), shellQuote(p))
	}
	return b.String()
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

// ErrUnreviewedDiff: session_commit was given the digest of a reviewed
// session_diff, and the diff it would commit now is another (a process the
// session left running changed the workspace since); nothing was committed.
// *UnreviewedDiffError carries the details. (session.ErrWorkspaceMoved is
// the same drift caught later, when a committed diff becomes the baseline.)
var ErrUnreviewedDiff = fmt.Errorf("%w: the workspace changed since the reviewed session_diff", dryexec.ErrCommitRefused)

// UnreviewedDiffError is session_commit's refusal of a diff that is not the
// one whose digest it was given.
type UnreviewedDiffError struct {
	SessionID string
	// Expected is the digest the caller passed, Actual the fresh diff's.
	Expected, Actual string
	// Paths are the paths the fresh diff would commit.
	Paths []string
}

func (e *UnreviewedDiffError) Error() string {
	paths := e.Paths
	more := ""
	if len(paths) > 20 {
		paths, more = paths[:20], fmt.Sprintf(" and %d more", len(paths)-20)
	}
	return fmt.Sprintf("%v: session %s's changes now have digest %s, not the expected %s (a process still running in the session may have changed them); nothing was committed. It would now commit: %s%s. Call session_diff again, review it, and pass its digest",
		ErrUnreviewedDiff, e.SessionID, e.Actual, e.Expected, strings.Join(paths, ", "), more)
}

func (e *UnreviewedDiffError) Unwrap() error { return ErrUnreviewedDiff }

// diffEntry is one change of a session diff as its digest encodes it.
type diffEntry struct {
	Path   string `json:"path"`
	Op     string `json:"op"`
	Kind   string `json:"kind,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	Size   int    `json:"size,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`
	Target string `json:"target,omitempty"`
}

// diffDigest is the hex sha256 of the receipts' canonical JSON (RFC 8785)
// of {"files": [...]}, sel's changes in d in selectDiff's order: each written file's content hash and mode, each
// symlink's target, each delete, each change of permissions alone. A
// session diff knows no owners or before-states (its baseline is the
// session's), so those are not in it. session_diff shows it and
// session_commit compares it with its own fresh diff's, so what is
// committed is exactly what was reviewed.
func diffDigest(d *session.Diff, sel diffSel) (string, error) {
	es := []diffEntry{}
	for _, p := range sel.writes {
		sum := sha256.Sum256(d.Writes[p])
		es = append(es, diffEntry{Path: p, Op: "write", Kind: "file", SHA256: hex.EncodeToString(sum[:]), Size: len(d.Writes[p]), Mode: uint32(d.Modes[p])})
	}
	for _, p := range sel.links {
		es = append(es, diffEntry{Path: p, Op: "write", Kind: "symlink", Target: d.Links[p]})
	}
	for _, p := range sel.deletes {
		es = append(es, diffEntry{Path: p, Op: "delete"})
	}
	for _, p := range sel.chmods {
		es = append(es, diffEntry{Path: p, Op: "chmod", Mode: uint32(d.Modes[p])})
	}
	doc, err := json.Marshal(map[string][]diffEntry{"files": es})
	if err != nil {
		return "", fmt.Errorf("encoding the session diff: %w", err)
	}
	return receipt.Digest(doc)
}
