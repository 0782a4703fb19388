package seatbelt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
)

// Nothing in this file has run: it is compiled and vetted for darwin on
// Linux (make lint), and its logic's platform-neutral parts are tested
// there.

// Available implements dryexec.Rung: what this Mac lacks (Missing, with
// macOS's lookups at the current directory). Nothing else stops it: the
// delta's host half (fsdelta) and commit build for darwin, though neither
// has run on a Mac (Notes says so).
func (r *Rung) Available(ctx context.Context) error {
	dir, err := os.Getwd()
	if err != nil {
		dir = "."
	}
	missing := Missing(ctx, darwinLookups(dir))
	if len(missing) == 0 {
		return nil
	}
	return &dryexec.IsolationUnavailableError{Rung: Name, Missing: strings.Join(missing, "; ")}
}

// Trial implements dryexec.Rung: the working directory cloned with
// clonefile, the command under sandbox-exec.
func (r *Rung) Trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	return trial(ctx, spec, platform{clone: cloneTree, confine: confine, homes: homes(), getenv: os.Getenv, denials: watchDenials})
}

// LogTool streams the unified log, where the kernel reports what Seatbelt
// denied.
const LogTool = "/usr/bin/log"

// watchDenials starts `log stream` on Seatbelt's reports that end with
// tag (those of a profile tagged tag: denials.go) and waits for a marker
// of its own to pass through it, or says why it could not: the trial then
// runs without recording masked reads or direct connections, and says so.
func watchDenials(ctx context.Context, marks, tag string) (*denialLog, string) {
	failed := func(err error) (*denialLog, string) {
		return nil, "seatbelt: masked reads and direct connections are denied but not recorded (reading Seatbelt's reports with log stream: " + err.Error() + ")"
	}
	if tag == "" || !validTag(tag) {
		return failed(fmt.Errorf("no usable tag %q", tag))
	}
	r, w, err := os.Pipe()
	if err != nil {
		return failed(err)
	}
	// The tag is letters, digits, '-' and '_': nothing the predicate's
	// string literal must escape.
	cmd := exec.Command(LogTool, "stream", "--style", "ndjson", "--predicate", `eventMessage ENDSWITH "`+tag+`"`)
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return failed(err)
	}
	end := func() { cmd.Process.Kill(); cmd.Wait() }
	mark := func(ctx context.Context, path string) error { return markDenial(ctx, path, tag) }
	l := newDenialLog(r, tag, marks, mark, end)
	if err := l.markAndWait(ctx, "mark-start"); err != nil {
		l.close()
		return failed(err)
	}
	return l, ""
}

// markDenial has a process of dryexec's own denied a read of path (which
// exists), under a profile that allows everything else and tags its one
// deny rule with tag, as the command's are: sandbox-exec running cat,
// which fails; the denial is what the stream is waited on for.
func markDenial(ctx context.Context, path, tag string) error {
	profile := "(version 1)\n(allow default)\n(deny file-read-data (with message " + quote(tag) + ") (literal " + quote(path) + "))\n"
	err := exec.CommandContext(ctx, SandboxExec, "-p", profile, "--", "/bin/cat", path).Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil // cat was refused, as it should be
	}
	if err == nil {
		return fmt.Errorf("%s read its marker: the profile did not apply", SandboxExec)
	}
	return err
}

// cloneTree clones the tree src to dst with clonefile(2): on APFS a
// copy-on-write copy of the whole hierarchy that costs metadata, not data.
// Elsewhere (HFS+, a network or FAT volume) there is no clone, and the
// rung says so rather than copy.
func cloneTree(src, dst string) error {
	src, err := filepath.EvalSymlinks(src)
	if err != nil {
		return err
	}
	switch err := unix.Clonefile(src, dst, unix.CLONE_NOFOLLOW); {
	case errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EXDEV):
		return &dryexec.IsolationUnavailableError{Rung: Name, Missing: fmt.Sprintf("APFS at %s and the temp dir (clonefile: %v)", src, err)}
	default:
		return err
	}
}

// homes are the home directories whose default masks apply: this user's.
func homes() []string {
	var out []string
	if h := os.Getenv("HOME"); h != "" {
		out = append(out, h)
	}
	if u, err := user.Current(); err == nil && u.HomeDir != "" && (len(out) == 0 || u.HomeDir != out[0]) {
		out = append(out, u.HomeDir)
	}
	return out
}

// darwinLookups are doctor's lookups on macOS.
func darwinLookups(dir string) Lookups {
	return Lookups{
		Executable: func(p string) error { return unix.Access(p, unix.X_OK) },
		Probe: func(ctx context.Context) error {
			out, err := exec.CommandContext(ctx, SandboxExec, "-p", "(version 1)(allow default)", "--", "/usr/bin/true").CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
			}
			return nil
		},
		FSType: func(d string) (string, error) {
			var st unix.Statfs_t
			if err := unix.Statfs(d, &st); err != nil {
				return "", err
			}
			return unix.ByteSliceToString(st.Fstypename[:]), nil
		},
		LookPath: exec.LookPath,
		Dir:      dir,
	}
}
