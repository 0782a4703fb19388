// Package rootless re-runs a test binary's own tests as an unprivileged user,
// so that suites written once (the conformance corpus, the escape corpus) also
// cover the ns rung's rootless mode. It is a test helper: only _test files
// import it.
package rootless

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// UID is the user (and group) the re-run uses: nobody.
const UID = 65534

// Env is set in the re-run's environment, so a suite can tell it is the
// restricted run (and not recurse).
const Env = "DRYEXEC_ROOTLESS_RERUN"

// Active reports whether this process is a re-run started by Rerun.
func Active() bool { return os.Getenv(Env) != "" }

// Rerun runs this test binary's tests matching pattern as uid/gid 65534 (no
// groups, through setpriv), from a copy that user can read, with HOME and
// TMPDIR in a directory it owns and env added. It fails t if the run fails or
// runs nothing, skips t where it cannot apply (not root, no setpriv, no ns
// rung for that user), and returns how many leaf subtests passed and skipped.
func Rerun(t *testing.T, pattern string, timeout time.Duration, env ...string) (pass, skip int) {
	t.Helper()
	if Active() {
		t.Skip("this is already the rootless re-run")
	}
	setpriv := testreq.NeedRootless(t)
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("", "dryexec-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, filepath.Base(self))
	if err := copyFile(self, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// A directory nobody owns, for HOME and TMPDIR (t.TempDir and the host
	// rung's temp dirs go there).
	home := filepath.Join(base, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, UID, UID); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(t.Context(), timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(c, setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
		bin, "-test.run", pattern, "-test.v", "-test.count=1", "-test.timeout="+timeout.String())
	cmd.Dir = home
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + home, "TMPDIR=" + home, Env + "=1", "LANG=C.UTF-8"}, env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("rootless run (uid %d) took %v", UID, time.Since(start).Round(time.Millisecond))
	// The ns rung's skip for that user (testreq.Need's wording, and the
	// older one).
	if m := "ns unavailable here"; bytes.Contains(out, []byte(m)) || bytes.Contains(out, []byte("ns rung unavailable here")) {
		if !bytes.Contains(out, []byte(m)) {
			m = "ns rung unavailable here"
		}
		testreq.Need(t, testreq.Rootless, fmt.Errorf("the ns rung is unavailable to uid %d:\n%s", UID, firstLine(out, m)))
	}
	if err != nil {
		t.Fatalf("the re-run failed as uid %d: %v\n%s", UID, err, out)
	}
	pass, skip = leafResults(out)
	if pass == 0 || bytes.Contains(out, []byte("no tests to run")) {
		t.Fatalf("the rootless run ran nothing:\n%s", out)
	}
	t.Logf("rootless: %d cases passed, %d skipped", pass, skip)
	for _, l := range skipLines(out) {
		t.Log(l)
	}
	return pass, skip
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}

func firstLine(out []byte, sub string) string {
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

var resultLine = regexp.MustCompile(`--- (PASS|SKIP|FAIL): (\S+)`)

// leafResults counts the leaf subtests of a -test.v output that passed and
// that were skipped.
func leafResults(out []byte) (pass, skip int) {
	res := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if m := resultLine.FindStringSubmatch(sc.Text()); m != nil {
			res[m[2]] = m[1]
		}
	}
	for name, r := range res {
		leaf := true
		for other := range res {
			if strings.HasPrefix(other, name+"/") {
				leaf = false
				break
			}
		}
		if !leaf {
			continue
		}
		switch r {
		case "PASS":
			pass++
		case "SKIP":
			skip++
		}
	}
	return pass, skip
}

func skipLines(out []byte) []string {
	var ls []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "--- SKIP") {
			ls = append(ls, strings.TrimSpace(l))
		}
	}
	return ls
}
