package linuxns_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/image"
	"github.com/dryexec/dryexec/internal/rootless"
	"github.com/dryexec/dryexec/internal/rungcompare"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// The rootless re-run's inputs: the image's reference, and the directory
// it writes its results to.
const (
	imageRefEnv = "DRYEXEC_TEST_ROOTLESS_IMAGE_REF"
	imageOutEnv = "DRYEXEC_TEST_ROOTLESS_IMAGE_OUT"
)

// rootlessImageResults is what the rootless re-run reports: each trial
// case's comparable delta and image section, each session case's steps.
type rootlessImageResults struct {
	Trials   map[string]rungcompare.Comparable
	Images   map[string]*dryexec.DeltaImage
	Codes    map[string]int
	Sessions map[string][]rungcompare.SessionStep
	Form     image.Form
}

// TestImageRootlessSameAsRoot: trials and sessions on an image with every
// awkward layer case (imagetest.Awkward), pulled from a registry on
// loopback, give an unprivileged caller (its own cache, in the userxattr
// form; the re-run as uid 65534) the same deltas and session steps, field
// by field, as root gets on ns, and the same image section. Owners are
// compared as "the caller" on each side: the image's files are the
// caller's in a rootless cache (docs/images.md, "Rootless"), as uid 0's
// are root's.
func TestImageRootlessSameAsRoot(t *testing.T) {
	if rootless.Active() {
		t.Skip("the rootless run itself")
	}
	testreq.NeedRoot(t)
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	ref := rungcompare.AwkwardImage(t)
	root := collectImageResults(t, ref)
	if root.Form != image.FormRoot {
		t.Fatalf("root's cache is in the %q form", root.Form)
	}
	out, err := os.MkdirTemp("", "dryexec-imgrootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(out) })
	if err := os.Chown(out, rootless.UID, rootless.UID); err != nil {
		t.Fatal(err)
	}
	os.Chmod(out, 0o755)
	rootless.Rerun(t, "^TestImageRootlessChild$", 8*time.Minute, imageRefEnv+"="+ref, imageOutEnv+"="+out)
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rl rootlessImageResults
	if err := json.Unmarshal(b, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Form != image.FormUserXattr {
		t.Errorf("the rootless cache is in the %q form, want userxattr", rl.Form)
	}
	for name, want := range root.Trials {
		got, ok := rl.Trials[name]
		if !ok {
			t.Errorf("%s: no rootless result", name)
			continue
		}
		if rl.Codes[name] != root.Codes[name] {
			t.Errorf("%s: exit %d as root, %d rootless", name, root.Codes[name], rl.Codes[name])
		}
		if !reflect.DeepEqual(root.Images[name], rl.Images[name]) {
			t.Errorf("%s: image sections: root %+v, rootless %+v", name, root.Images[name], rl.Images[name])
		}
		if !reflect.DeepEqual(want, got) {
			t.Errorf("%s: deltas differ:\n%s", name, rungcompare.DiffFields(want, got, "root", "rootless"))
		}
	}
	for name, want := range root.Sessions {
		got := rl.Sessions[name]
		if len(got) != len(want) {
			t.Errorf("session %s: %d steps as root, %d rootless", name, len(want), len(got))
			continue
		}
		for i := range want {
			if !reflect.DeepEqual(want[i], got[i]) {
				a, _ := json.Marshal(want[i])
				b, _ := json.Marshal(got[i])
				t.Errorf("session %s, step %d differs:\n  root:     %s\n  rootless: %s", name, i, a, b)
			}
		}
	}
}

// TestImageRootlessChild is TestImageRootlessSameAsRoot's unprivileged
// side.
func TestImageRootlessChild(t *testing.T) {
	ref, out := os.Getenv(imageRefEnv), os.Getenv(imageOutEnv)
	if !rootless.Active() || ref == "" {
		t.Skip("run by TestImageRootlessSameAsRoot")
	}
	// The registry is the parent's, which outlives this process: its
	// kept-alive connections would be goroutines left at the end.
	t.Cleanup(remote.DefaultTransport.(*http.Transport).CloseIdleConnections)
	res := collectImageResults(t, ref)
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "results.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// collectImageResults runs rungcompare's image trial and session cases on
// ns as this caller, each owner that is the caller's written as -1.
func collectImageResults(t *testing.T, ref string) rootlessImageResults {
	res := rootlessImageResults{Trials: map[string]rungcompare.Comparable{}, Images: map[string]*dryexec.DeltaImage{},
		Codes: map[string]int{}, Sessions: map[string][]rungcompare.SessionStep{}}
	home := t.TempDir()
	for _, c := range rungcompare.ImageCases() {
		args := append([]string{"--image", ref, "--no-store"}, c.Args...)
		code, d := rungcompare.CLIRun(t, home, "ns", c.Stdin, args...)
		if c.Stdout != "" && d.Process.Stdout != c.Stdout {
			t.Errorf("%s: stdout %q (stderr %q), want %q", c.Name, d.Process.Stdout, d.Process.Stderr, c.Stdout)
		}
		cmp := rungcompare.Of(d, "/w", c.SetMtimes)
		for i := range cmp.Touched {
			// A directory a layer holds only as the parent of its entries
			// (/w of a layer of whiteouts in /w/wh) has the time of the
			// pull that unpacked it, and each side pulled at its own.
			cmp.Touched[i].BeforeMtimeNS = min(cmp.Touched[i].BeforeMtimeNS, 1)
		}
		for _, fs := range [][]dryexec.FileChange{cmp.Files, cmp.Touched} {
			for i := range fs {
				if fs[i].UID == os.Getuid() && fs[i].GID == os.Getgid() {
					fs[i].UID, fs[i].GID = -1, -1
				}
			}
		}
		res.Trials[c.Name], res.Images[c.Name], res.Codes[c.Name] = cmp, d.Image, code
	}
	c, err := image.Open(filepath.Join(home, "images"), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Form = c.Form()
	img := rungcompare.PullImage(t, ref)
	repl := strings.NewReplacer()
	for _, sc := range rungcompare.ImageSessionCases(img) {
		res.Sessions[sc.Name] = rungcompare.SessionSteps(t, "ns", sc, rungcompare.Fixture(t, "files"), repl)
	}
	return res
}
