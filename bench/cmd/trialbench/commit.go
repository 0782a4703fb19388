//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/commit"
	"github.com/dryexec/dryexec/receipt"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/store"
)

// writeFilesPy writes argv[1] files of 1 KiB under out/, 100 per directory,
// each with its own content: the same script makes the trial's files and the
// tree cp -a copies.
const writeFilesPy = `import os, sys
n = int(sys.argv[1])
for i in range(n):
    d = "out/d%d" % (i // 100)
    if i % 100 == 0:
        os.makedirs(d)
    with open("%s/f%d" % (d, i), "wb") as f:
        f.write((("%d\n" % i) * 1024)[:1024].encode())
`

// commitGroup: committing a trial that wrote cfg.files files (commit.Apply:
// conflict check, every content hashed before and while it is staged in temp
// files, journal, fsync; store.CommitWith, as every interface commits: the
// same after the stored delta's receipt is verified) against cp -a of the
// same files, and cp -a followed by a sync of the file system (commit makes
// its changes durable; cp -a alone does not). Rates are files per second.
func commitGroup(e *env) ([]group, error) {
	n := e.cfg.files
	g := group{key: "commit", title: fmt.Sprintf("Commit of a trial that wrote %d files of 1 KiB vs cp -a", n), unit: rate("files/s"), bases: []int{2, 3}}
	// The trial writes into trialDir/out; the commit puts out there on the
	// host, and the prep step removes it again, so every commit starts from
	// the host the trial saw.
	trialDir := filepath.Join(e.work, "commit-trial")
	src := filepath.Join(e.work, "commit-cpsrc")
	dst := filepath.Join(e.work, "commit-cpdst")
	for _, d := range []string{trialDir, src, dst} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	py := []string{"/usr/bin/python3", "-c", writeFilesPy, fmt.Sprint(n)}
	if err := e.command(src, py...)(); err != nil {
		return nil, fmt.Errorf("writing the cp -a source: %w", err)
	}
	st, err := store.Open(filepath.Join(e.work, "store"), 0)
	if err != nil {
		return nil, err
	}
	id := dryexec.NewTrialID()
	rec, err := st.Begin(id)
	if err != nil {
		return nil, err
	}
	d, err := (&linuxns.Rung{}).Trial(e.ctx, dryexec.TrialSpec{TrialID: id, Blobs: rec,
		Action: dryexec.Action{Argv: py, Cwd: trialDir, Env: benchEnv}})
	if err = checkDelta(d, err); err != nil {
		rec.Abort()
		return nil, fmt.Errorf("the trial writing %d files: %w", n, err)
	}
	created := 0
	for _, f := range d.Files {
		if f.Op == dryexec.OpCreate && f.Kind == dryexec.KindFile {
			created++
		}
	}
	if created != n {
		rec.Abort()
		return nil, fmt.Errorf("the trial created %d files, want %d", created, n)
	}
	// Signed as `dryexec run` signs it: store.CommitWith commits only what
	// verifies.
	signer, err := receipt.LoadOrCreate(st.Dir())
	if err != nil {
		rec.Abort()
		return nil, err
	}
	if err := signer.Sign(d); err != nil {
		rec.Abort()
		return nil, err
	}
	if err := rec.Save(d); err != nil {
		return nil, err
	}
	// A committed trial's content leaves the store (docs/limits.md): every
	// round after the first would find none. The blobs are kept aside, as
	// links, once; commit.Apply reads them there and each store.CommitWith
	// round gets them back, unmeasured, in its prep.
	blobs := filepath.Join(st.Dir(), "trials", id, "blobs")
	kept := filepath.Join(e.work, "commit-blobs")
	if err := linkFiles(blobs, kept); err != nil {
		return nil, fmt.Errorf("keeping the trial's content aside: %w", err)
	}
	out := filepath.Join(trialDir, "out")
	opt := commit.Options{JournalDir: st.JournalDir(), OpenBlob: func(sha string) (io.ReadCloser, error) {
		if len(sha) != 64 || strings.ContainsAny(sha, "/.") {
			return nil, fmt.Errorf("bad content hash %q", sha)
		}
		return os.Open(filepath.Join(kept, sha))
	}}
	perSec := func(f func() error) func() (float64, error) {
		return func() (float64, error) {
			s := time.Now()
			err := f()
			return float64(n) / time.Since(s).Seconds(), err
		}
	}
	cleanDst := func() error { return os.RemoveAll(filepath.Join(dst, "out")) }
	g.cands = []candidate{
		{name: "commit.Apply (checked, journaled, fsynced)", prep: func() error { return os.RemoveAll(out) },
			run: perSec(func() error {
				applied, err := commit.Apply(e.ctx, d, opt)
				if err == nil && len(applied) != len(d.Files) {
					err = fmt.Errorf("applied %d of %d changes", len(applied), len(d.Files))
				}
				return err
			})},
		{name: "store.CommitWith (receipt verified, contents re-hashed first)", label: "store.CommitWith (verified)",
			// A trial commits once: its state goes with the host's copy.
			prep: func() error {
				if err := os.Remove(filepath.Join(st.Dir(), "trials", id, "state.json")); err != nil && !os.IsNotExist(err) {
					return err
				}
				if err := os.RemoveAll(blobs); err != nil {
					return err
				}
				if err := linkFiles(kept, blobs); err != nil {
					return err
				}
				return os.RemoveAll(out)
			},
			run: perSec(func() error {
				r, err := st.CommitWith(e.ctx, id, store.CommitOptions{})
				if err == nil && len(r.Applied) != len(d.Files) {
					err = fmt.Errorf("applied %d of %d changes", len(r.Applied), len(d.Files))
				}
				return err
			})},
		{name: "cp -a", prep: cleanDst, run: perSec(e.command(dst, "cp", "-a", filepath.Join(src, "out"), "out"))},
		{name: "cp -a + sync -f", label: "cp -a + sync", prep: cleanDst,
			run: perSec(e.command(dst, "sh", "-c", "cp -a "+filepath.Join(src, "out")+" out && sync -f out"))},
	}
	return []group{g}, nil
}

// linkFiles hard-links every file of directory src into dst, which it makes.
func linkFiles(src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.Link(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
