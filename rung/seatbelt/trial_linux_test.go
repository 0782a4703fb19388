package seatbelt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/commit"
	"github.com/dryexec/dryexec/fswalk"
	"github.com/dryexec/dryexec/internal/acceptance"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/netsim"
	"github.com/dryexec/dryexec/rung/host"
	"github.com/dryexec/dryexec/wire"
)

// copyClone stands in for clonefile: a plain copy that keeps what a clone
// keeps (modes, owners, mtimes, symlinks, fifos, hard links).
func copyClone(src, dst string) error {
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("cp -a: %v: %s", err, out)
	}
	return nil
}

// linuxPlatform runs a trial's steps on Linux: a copy for the clone, no
// sandbox-exec (confine, when set, sees the profile), homes as given,
// dryexec's home (where netsim's CA is made) the test's own.
func linuxPlatform(t *testing.T, homes []string, confine func(string, []string) []string) platform {
	home := filepath.Join(t.TempDir(), "dryexec-home")
	return platform{clone: copyClone, confine: confine, homes: homes,
		getenv: func(k string) string {
			if k == "DRYEXEC_HOME" {
				return home
			}
			return ""
		}}
}

// tree is the working directory every case starts from: the acceptance
// scenario's files, a symlink and a hard-linked pair.
func tree(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "w")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := acceptance.MakeDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		os.Symlink("keep.txt", filepath.Join(dir, "ln")),
		os.WriteFile(filepath.Join(dir, "h1"), []byte("linked\n"), 0o644),
		os.Link(filepath.Join(dir, "h1"), filepath.Join(dir, "h2")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type memSink struct{ blobs map[string][]byte }

func (m *memSink) PutBlob(r io.Reader) (string, int64, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return "", int64(len(b)), err
	}
	sum := sha256.Sum256(b)
	h := hex.EncodeToString(sum[:])
	m.blobs[h] = b
	return h, int64(len(b)), nil
}

func action(dir, script string) dryexec.Action {
	return dryexec.Action{Argv: []string{"sh", "-c", script}, Cwd: dir, Env: map[string]string{"PATH": "/usr/bin:/bin"}}
}

// change is a FileChange as two rungs must agree on it: not its mtime
// (each run writes at its own time) nor its link group's number.
func change(dir string, f dryexec.FileChange) string {
	return fmt.Sprintf("%s %s %s size=%d mode=%s before=%s sha=%s before_sha=%s link=%q owner=%d:%d linked=%v diff=%q",
		f.Op, strings.TrimPrefix(f.Path, dir+"/"), f.Kind, f.Size, f.Mode, f.BeforeMode, f.SHA256, f.BeforeSHA256, f.LinkTarget, f.UID, f.GID, f.LinkGroup != 0, f.Diff)
}

// TestTrialSameDeltaAsHost: for every kind of change, the clone walk fed
// to package fsdelta gives the delta the host rung gives for the same
// command on the same tree, field by field, touches included; and the ops
// are the ones the command made.
func TestTrialSameDeltaAsHost(t *testing.T) {
	tests := []struct {
		name   string
		script string
		want   []string // "op path"
	}{
		{"nothing", `true`, nil},
		{"read only", `cat keep.txt sub/x >/dev/null; ls -R >/dev/null`, nil},
		{"acceptance", `echo new > a.txt; echo more >> keep.txt; rm gone.txt; chmod 755 s.sh; mkdir d; rm -r sub; touch -m keep.txt`,
			[]string{"chmod s.sh", "create a.txt", "delete gone.txt", "delete sub/x", "mkdir d", "modify keep.txt", "rmdir sub"}},
		{"rename file", `mv gone.txt moved.txt`, []string{"create moved.txt", "delete gone.txt"}},
		{"rename over", `mv gone.txt keep.txt`, []string{"delete gone.txt", "modify keep.txt"}},
		{"rename dir", `mv sub sub2`, []string{"create sub2/x", "delete sub/x", "mkdir sub2", "rmdir sub"}},
		{"new tree", `mkdir -p n/m && echo deep > n/m/f`, []string{"create n/m/f", "mkdir n", "mkdir n/m"}},
		{"write deep", `echo y >> sub/x`, []string{"modify sub/x"}},
		{"same size, mtime set back", `touch -r keep.txt ref && printf KEEP > k && cat k > keep.txt; echo >> keep.txt; touch -r ref keep.txt; rm ref k`, []string{"modify keep.txt"}},
		{"touch only", `touch -m -d 2001-01-01 keep.txt`, nil},
		{"symlink", `ln -s s.sh l2; rm ln`, []string{"delete ln", "symlink l2"}},
		{"file over dir", `rm -r sub && echo f > sub`, []string{"create sub", "delete sub/x", "rmdir sub"}},
		{"dir over file", `rm gone.txt && mkdir gone.txt`, []string{"delete gone.txt", "mkdir gone.txt"}},
		{"dir replaced", `rm -r sub && mkdir sub && echo x > sub/y`, []string{"create sub/y", "delete sub/x"}},
		{"fifo", `mkfifo p`, []string{"create p"}},
		{"hard link written", `echo more >> h1`, []string{"modify h1", "modify h2"}},
		{"hard link made", `ln keep.txt k2`, []string{"create k2", "modify keep.txt"}}, // keep.txt is now one of a link group
		{"hostile names", `printf a > "$(printf 'q"b\\\\c\nd')"; mkdir -- '-x (allow default)'`, []string{"create q\"b\\\\c\nd", "mkdir -x (allow default)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := tree(t)
			ctx := context.Background()
			hd, err := (&host.Rung{}).Trial(ctx, dryexec.TrialSpec{Action: action(dir, tc.script), NoDefaultMasks: true})
			if err != nil {
				t.Fatal(err)
			}
			sd, err := trial(ctx, dryexec.TrialSpec{Action: action(dir, tc.script), NoDefaultMasks: true}, linuxPlatform(t, nil, nil))
			if err != nil {
				t.Fatal(err)
			}
			if sd.Process.ExitCode != 0 {
				t.Fatalf("exit %d: %s", sd.Process.ExitCode, sd.Process.Stderr)
			}
			var got, want, gotOps []string
			for _, f := range sd.Files {
				got = append(got, change(dir, f))
				gotOps = append(gotOps, string(f.Op)+" "+strings.TrimPrefix(f.Path, dir+"/"))
			}
			for _, f := range hd.Files {
				want = append(want, change(dir, f))
			}
			for _, f := range sd.Touched {
				got = append(got, "touched "+strings.TrimPrefix(f.Path, dir+"/"))
			}
			for _, f := range hd.Touched {
				want = append(want, "touched "+strings.TrimPrefix(f.Path, dir+"/"))
			}
			if !slices.Equal(got, want) {
				t.Errorf("seatbelt's delta is not the host rung's:\nseatbelt %q\n    host %q", got, want)
			}
			slices.Sort(gotOps)
			if !slices.Equal(gotOps, tc.want) {
				t.Errorf("ops %q, want %q", gotOps, tc.want)
			}
			if sd.Rung != Name || sd.Warnings[0] != Unenforced || sd.Totals.FilesChanged != len(sd.Files) {
				t.Errorf("rung %q warnings %q totals %+v", sd.Rung, sd.Warnings, sd.Totals)
			}
		})
	}
}

// recorder is an entrySink that keeps what the walk reports, reading each
// content whole as the Differ would.
type recorder struct{ got []string }

func (r *recorder) Add(e *wire.FSEntry, content io.Reader) error {
	s := fmt.Sprintf("%s %s", e.Kind, e.Path)
	if content != nil {
		b, err := io.ReadAll(content)
		if err != nil {
			return err
		}
		s += fmt.Sprintf(" %q", b)
	}
	r.got = append(r.got, s)
	return nil
}

// TestCloneWalk: the walk reports what the command changed and nothing it
// left alone (the fast path), including the changes a size and mtime
// comparison would miss: content rewritten at the same size with the mtime
// set back, and a file replaced by another one of the clone's.
func TestCloneWalk(t *testing.T) {
	tests := []struct {
		name   string
		script string
		want   []string
	}{
		{"untouched", `cat f07 > /dev/null; ls -l d > /dev/null`, nil},
		{"one of many", `echo changed > d/f03`, []string{"d d", `f d/f03 "changed\n"`}},
		{"same size, mtime set back", `touch -r d/f05 /tmp/ref.$$; printf 'file 9\n' > d/f05; touch -r /tmp/ref.$$ d/f05`, []string{"d d", `f d/f05 "file 9\n"`}},
		{"replaced by a sibling", `mv d/f01 d/f02`, []string{"d d", "w d/f01", `f d/f02 "file 1\n"`}},
		{"chmod", `chmod 600 f07`, []string{`f f07 "file 7\n"`}},
		{"deleted deep", `rm d/f09`, []string{"d d", "w d/f09"}},
		{"new dir", `mkdir -p d/e && echo n > d/e/n`, []string{"d d", "d d/e", `f d/e/n "n\n"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "clone")
			if err := os.MkdirAll(filepath.Join(root, "d"), 0o755); err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				for _, p := range []string{fmt.Sprintf("d/f%02d", i), fmt.Sprintf("f%02d", i)} {
					if err := os.WriteFile(filepath.Join(root, p), fmt.Appendf(nil, "file %d\n", i), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			snap, err := takeSnapshot(root)
			if err != nil {
				t.Fatal(err)
			}
			since, err := fswalk.FSTick(filepath.Dir(root))
			if err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("sh", "-c", "cd "+root+" && "+tc.script).CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			var r recorder
			if err := walkClone(root, snap, since, &r); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.got, tc.want) {
				t.Errorf("walk reported\n %q\nwant\n %q", r.got, tc.want)
			}
		})
	}
}

// TestTrialCommit: a seatbelt delta commits through package commit like
// any rung's, and the working directory is then what the command left in
// its clone.
//
// Also with the working directory named through a symlink (macOS's /tmp
// and /var are symlinks to /private/...): the Differ and commit follow no
// symlink on the way to a path, so the trial works from the resolved
// directory, and the delta's paths are the resolved ones.
func TestTrialCommit(t *testing.T) {
	for _, viaLink := range []bool{false, true} {
		t.Run(fmt.Sprintf("viaSymlink=%v", viaLink), func(t *testing.T) { testTrialCommit(t, viaLink) })
	}
}

func testTrialCommit(t *testing.T, viaLink bool) {
	dir := tree(t)
	cwd := dir
	if viaLink {
		cwd = filepath.Join(t.TempDir(), "link")
		if err := os.Symlink(dir, cwd); err != nil {
			t.Fatal(err)
		}
	}
	blobs := &memSink{blobs: map[string][]byte{}}
	d, err := trial(context.Background(), dryexec.TrialSpec{Action: action(cwd, acceptance.Script), Blobs: blobs, NoDefaultMasks: true}, linuxPlatform(t, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range d.Files {
		if !strings.HasPrefix(f.Path, dir+"/") {
			t.Errorf("delta path %s is not beneath the resolved working directory %s", f.Path, dir)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "a.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the trial changed the working directory: %v", err)
	}
	_, err = commit.Apply(context.Background(), d, commit.Options{JournalDir: t.TempDir(),
		OpenBlob: func(sha string) (io.ReadCloser, error) {
			b, ok := blobs.blobs[sha]
			if !ok {
				return nil, os.ErrNotExist
			}
			return io.NopCloser(bytes.NewReader(b)), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"a.txt": "new\n", "keep.txt": "keep\nmore\n", "gone.txt": "", "sub": "", "d": "dir"} {
		fi, err := os.Stat(filepath.Join(dir, p))
		switch {
		case want == "" && !errors.Is(err, os.ErrNotExist):
			t.Errorf("%s: still there after commit (%v)", p, err)
		case want == "dir" && (err != nil || !fi.IsDir()):
			t.Errorf("%s: not a dir after commit (%v)", p, err)
		case want != "" && want != "dir":
			b, _ := os.ReadFile(filepath.Join(dir, p))
			if string(b) != want {
				t.Errorf("%s: %q after commit, want %q", p, b, want)
			}
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "s.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("s.sh: %v %v, want mode 0755", fi, err)
	}
}

// TestTrialMasks: a credential beneath the working directory is not in the
// clone (the command cannot read the clone's copy either), the delta does
// not report it deleted, and the profile denies both it and its clone.
func TestTrialMasks(t *testing.T) {
	dir := tree(t)
	if err := os.MkdirAll(filepath.Join(dir, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".ssh", "id"), []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	var profile string
	pf := linuxPlatform(t, []string{dir}, func(p string, argv []string) []string { profile = p; return argv })
	d, err := trial(context.Background(), dryexec.TrialSpec{Action: action(dir, `cat .ssh/id; ls -a; echo x > a`)}, pf)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(d.Process.Stdout, "SECRET") || strings.Contains(d.Process.Stdout, ".ssh") {
		t.Errorf("the command saw the clone's credential: %q", d.Process.Stdout)
	}
	var ops []string
	for _, f := range d.Files {
		ops = append(ops, string(f.Op)+" "+strings.TrimPrefix(f.Path, dir+"/"))
	}
	if !slices.Equal(ops, []string{"create a"}) {
		t.Errorf("delta %q, want only create a", ops)
	}
	r := rules(t, profile)
	masked := r["deny file-read-data file-write*"].filters()["subpath"]
	var inClone bool
	for _, m := range masked {
		inClone = inClone || strings.HasSuffix(m, "/w/.ssh") && !strings.HasPrefix(m, dir)
	}
	if !slices.Contains(masked, dir+"/.ssh") || !inClone {
		t.Errorf("masked %q: want %s/.ssh and its clone's", masked, dir)
	}
	if hidden := r["deny file-read* file-write*"].filters()["subpath"]; !slices.Contains(hidden, pf.getenv("DRYEXEC_HOME")) {
		t.Errorf("hidden %q: want dryexec's home", hidden)
	}
	if _, err := os.Stat(filepath.Join(dir, ".ssh", "id")); err != nil {
		t.Errorf("the original credential: %v", err)
	}
}

// TestTrialRefuses: what the rung cannot honour is refused before anything
// runs, with the error a caller tests for.
func TestTrialRefuses(t *testing.T) {
	dir := tree(t)
	var iu *dryexec.IsolationUnavailableError
	for _, c := range []struct {
		name  string
		spec  dryexec.TrialSpec
		homes []string
		is    func(error) bool
	}{
		{"net spec malformed", dryexec.TrialSpec{Net: []string{"allow:"}}, nil, func(err error) bool { return errors.Is(err, dryexec.ErrBadAction) }},
		{"net mock file missing", dryexec.TrialSpec{Net: []string{"mock:" + filepath.Join(dir, "nonexistent.yaml")}}, nil, func(err error) bool { return errors.Is(err, netsim.ErrBadConfig) }},
		{"image", dryexec.TrialSpec{Image: &dryexec.ImageRoot{}}, nil, func(err error) bool { return errors.As(err, &iu) }},
		{"cwd masked", dryexec.TrialSpec{Masks: []string{dir}}, nil, func(err error) bool { return errors.Is(err, dryexec.ErrBadAction) }},
		{"mask no literal carries", dryexec.TrialSpec{Masks: []string{"/Users/a/new\nline"}}, nil, func(err error) bool {
			var pe *PathError
			return errors.Is(err, dryexec.ErrBadAction) && errors.As(err, &pe) && pe.Path == "/Users/a/new\nline"
		}},
		{"cwd in a home's mask", dryexec.TrialSpec{}, []string{filepath.Dir(dir)}, func(err error) bool { return errors.Is(err, dryexec.ErrBadAction) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := c.spec
			spec.Action = action(dir, "echo ran > ran")
			if c.name == "cwd in a home's mask" {
				// dir is the home's ".ssh" here.
				ssh := filepath.Join(filepath.Dir(dir), ".ssh")
				if err := os.Rename(dir, ssh); err != nil {
					t.Fatal(err)
				}
				defer os.Rename(ssh, dir)
				spec.Action.Cwd = ssh
			}
			_, err := trial(context.Background(), spec, linuxPlatform(t, c.homes, nil))
			if !c.is(err) {
				t.Fatalf("%v: not the error wanted", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
				t.Fatal("the command ran")
			}
		})
	}
	if _, err := trial(context.Background(), dryexec.TrialSpec{Net: []string{"none"}, Action: action(dir, "true"), NoDefaultMasks: true}, linuxPlatform(t, nil, nil)); err != nil {
		t.Errorf("--net none: %v", err)
	}
}

// TestTrialTmp: the command's TMPDIR is the sandbox's private tmp, whatever
// the action says (the profile lets it write nowhere else outside the
// clone); what it writes there is in no delta, and the delta records the
// action's own environment.
func TestTrialTmp(t *testing.T) {
	dir := tree(t)
	a := action(dir, `echo x > "$TMPDIR/t" && test "$TMPDIR" != /tmp && cat "$TMPDIR/t"`)
	a.Env["TMPDIR"] = "/tmp"
	d, err := trial(context.Background(), dryexec.TrialSpec{Action: a, NoDefaultMasks: true}, linuxPlatform(t, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if d.Process.ExitCode != 0 || d.Process.Stdout != "x\n" {
		t.Fatalf("exit %d stdout %q stderr %q", d.Process.ExitCode, d.Process.Stdout, d.Process.Stderr)
	}
	if len(d.Files) != 0 || d.Action.Env["TMPDIR"] != "/tmp" {
		t.Errorf("files %v, recorded TMPDIR %q: want none and /tmp", d.Files, d.Action.Env["TMPDIR"])
	}
}

// TestTrialNetwork: the command reaches netsim through the proxy variables
// (a caller's NO_PROXY does not send it around them), over HTTP and, with
// netsim's CA in the bundle it is pointed at, HTTPS; the profile allows
// exactly the port netsim listens on; the delta's network events are
// netsim's log, as on the other rungs. With --net none every request is
// refused and logged. (On Linux the command runs unconfined: that nothing
// but the proxy's port is reachable is the profile's, TestProfileRules.)
func TestTrialNetwork(t *testing.T) {
	testreq.NeedTool(t, "curl")
	dir := tree(t)
	mocks := filepath.Join(t.TempDir(), "mocks.yaml")
	if err := os.WriteFile(mocks, []byte("routes:\n  - host: api.example.test\n    path: /v1/*\n    status: 200\n    body: mocked\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `curl -sS -w ' %{http_code}\n' http://api.example.test/v1/a; curl -sS -w ' %{http_code}\n' https://api.example.test/v1/b; echo "$https_proxy"`
	for _, c := range []struct {
		net    []string
		out    string
		events []string
	}{
		{[]string{"mock:" + mocks}, "mocked 200\nmocked 200\n", []string{"http http://api.example.test/v1/a mocked 200", "https https://api.example.test/v1/b mocked 200"}},
		{nil, "netsim: network mode none\n 403\n 000\n", []string{"tcp api.example.test blocked network mode none", "tcp api.example.test blocked network mode none"}},
	} {
		t.Run(fmt.Sprint(c.net), func(t *testing.T) {
			a := action(dir, script)
			a.Env["NO_PROXY"], a.Env["no_proxy"] = "*", "*"
			var profile string
			pf := linuxPlatform(t, nil, func(p string, argv []string) []string { profile = p; return argv })
			d, err := trial(context.Background(), dryexec.TrialSpec{Action: a, Net: c.net, NoDefaultMasks: true}, pf)
			if err != nil {
				t.Fatal(err)
			}
			out, proxy, _ := strings.Cut(strings.TrimSuffix(d.Process.Stdout, "\n"), "http://dryexec:")
			token, proxy, _ := strings.Cut(proxy, "@127.0.0.1:")
			if len(token) != 32 {
				t.Errorf("proxy URL without the trial's token: %q", d.Process.Stdout)
			}
			if out != c.out {
				t.Errorf("stdout %q, want %q; stderr %s", d.Process.Stdout, c.out, d.Process.Stderr)
			}
			if want := fmt.Sprintf(`(remote ip "localhost:%s")`, proxy); proxy == "" || !strings.Contains(profile, want) {
				t.Errorf("profile does not allow the proxy's port %q:\n%s", proxy, profile)
			}
			// The trial's own tag on its deny rules, its markers' dir hidden.
			if !strings.Contains(profile, `(deny default (with message "dryexec-`) || !strings.Contains(profile, `/marks")`) {
				t.Errorf("profile without the trial's tag or its markers' dir hidden:\n%s", profile)
			}
			var got []string
			for _, e := range d.Network {
				s := fmt.Sprintf("%s %s %s", e.Proto, e.URL, e.Action)
				if e.URL == "" {
					s = fmt.Sprintf("%s %s %s %s", e.Proto, e.Host, e.Action, e.Reason)
				}
				if e.Status != 0 {
					s += fmt.Sprint(" ", e.Status)
				}
				got = append(got, s)
			}
			if !slices.Equal(got, c.events) {
				t.Errorf("network events\n %q\nwant\n %q", got, c.events)
			}
			if d.Action.Env["NO_PROXY"] != "*" {
				t.Errorf("the recorded action lost its NO_PROXY: %v", d.Action.Env)
			}
		})
	}
}
