package server_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/server"
)

// TestTrialHome: a trial request naming the store its client records trials
// in runs only on a daemon of that store (the same directory, through a
// symlink too); another store's is refused with 409 other_home before
// anything runs, with nothing recorded.
func TestTrialHome(t *testing.T) {
	requireNS(t)
	home := filepath.Join(t.TempDir(), "home")
	d := startDaemon(t, server.Config{StoreDir: home, Pool: -1}, server.HandlerOptions{})
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(home, link); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	wd := t.TempDir()
	for _, tc := range []struct {
		name string
		home string
		want int
		code string
	}{
		{"none given", "", http.StatusCreated, ""},
		{"the daemon's", home, http.StatusCreated, ""},
		{"through a symlink", link, http.StatusCreated, ""},
		{"another store", other, http.StatusConflict, "other_home"},
		{"no such dir", filepath.Join(other, "missing"), http.StatusConflict, "other_home"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := server.TrialRequest{Argv: []string{"sh", "-c", "echo x > f"}, Cwd: wd, Home: tc.home}
			if tc.code != "" {
				// The trials, without the daemon's spare directory
				// (store.KeepSpare), which it may be remaking meanwhile.
				before := storedTrials(home)
				d.fails(t, "POST", "/v1/trials", req, tc.want, tc.code)
				after := storedTrials(home)
				if len(after) != len(before) {
					t.Fatalf("a refused trial left %d entries in the store (before: %d)", len(after), len(before))
				}
				return
			}
			var delta dryexec.StateDelta
			d.ok(t, "POST", "/v1/trials", req, tc.want, &delta)
			if len(delta.Files) != 1 {
				t.Fatalf("the trial's delta: %+v", delta.Files)
			}
		})
	}
}

// storedTrials lists what the store under home holds but the daemon's spare
// directory (store.KeepSpare), which it may be remaking meanwhile.
func storedTrials(home string) []string {
	ents, _ := os.ReadDir(filepath.Join(home, "trials"))
	var out []string
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".spare") {
			out = append(out, e.Name())
		}
	}
	return out
}
