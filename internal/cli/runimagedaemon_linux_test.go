package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRunImageThroughDaemon: `run --image` goes to the daemon of this
// install as any trial does (--via daemon, and auto when one answers); the
// daemon pulls the image into its store's cache, $DRYEXEC_HOME/images, the
// one `run --via local` and `dryexec images` use; the delta is the one an
// in-process run gives; an image the daemon cannot have is refused (exit 1)
// and a reference that does not parse is the caller's mistake (exit 2), as
// in-process.
func TestRunImageThroughDaemon(t *testing.T) {
	ref := testImageRef(t)
	home := t.TempDir()
	d := startTestDaemon(t, home)
	vars := map[string]string{"XDG_RUNTIME_DIR": d.runtime}
	script := `pwd; echo "$GREETING $EXTRA $PATH"; echo more >> hello.txt; echo new > new.txt`
	for _, tc := range []struct {
		name, via  string
		ref        string
		wantCode   int
		wantDaemon bool
	}{
		{name: "--via daemon", via: "daemon", ref: ref, wantDaemon: true},
		{name: "auto", ref: ref, wantDaemon: true},
		{name: "--via local", via: "local", ref: ref},
		{name: "missing image", via: "daemon", ref: strings.TrimSuffix(ref, ":1") + "-missing:1", wantCode: ExitRefused},
		{name: "bad reference", via: "daemon", ref: "oci:", wantCode: ExitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"run", "--json", "-q", "--image", tc.ref, "--env", "EXTRA=caller"}
			if tc.via != "" {
				args = append(args, "--via", tc.via)
			}
			code, out, errs := cliWith(t, home, vars, append(args, "--", "sh", "-c", script)...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d: %s", code, tc.wantCode, errs)
			}
			if tc.wantCode != 0 {
				if strings.TrimSpace(out) != "" {
					t.Errorf("a refused trial printed %q", out)
				}
				return
			}
			got := decode(t, out)
			if d.ran(got.TrialID) != tc.wantDaemon {
				t.Fatalf("the daemon ran %s: %v, want %v (%s)", got.TrialID, d.ran(got.TrialID), tc.wantDaemon, errs)
			}
			if want := "/app\nimage caller /bin\n"; got.Process.Stdout != want {
				t.Errorf("stdout %q, want %q (stderr %q)", got.Process.Stdout, want, got.Process.Stderr)
			}
			var files []string
			for _, f := range got.Files {
				files = append(files, string(f.Op)+" "+f.Path)
			}
			slices.Sort(files)
			if want := []string{"create /app/new.txt", "modify /app/hello.txt"}; !slices.Equal(files, want) {
				t.Errorf("delta %q, want %q", files, want)
			}
			if got.Image == nil || got.Image.Ref != tc.ref || got.Image.Workspace != "/app" {
				t.Errorf("image %+v", got.Image)
			}
			if strings.Contains(errs, "pulled") {
				t.Errorf("the run pulled the image itself: %q", errs)
			}
		})
	}
	// The daemon's pull is in this install's cache: `images ls` lists it.
	code, out, errs := cliWith(t, home, vars, "images", "ls")
	if code != 0 || !strings.Contains(out, strings.TrimSuffix(ref, ":1")) {
		t.Errorf("images ls: exit %d, %q %q", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(home, "images", "images")); err != nil {
		t.Error(err)
	}
}
