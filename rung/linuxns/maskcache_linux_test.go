package linuxns

import (
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMaskCache changes the host the ways a secret can appear, vanish or be
// swapped under a mask path, one step after another, and checks after each
// that the cached answer is what a fresh resolution gives, and that steps
// that cannot matter are answered from the cache.
func TestMaskCache(t *testing.T) {
	tmp := t.TempDir()
	home := tmp + "/home"
	stage := tmp + "/stage"
	for _, d := range []string{home, stage} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HOME", home)
	mt := &mountTable{fd: -1}
	defer mt.close()
	c := newMaskCache()
	defer c.close()
	extra := []string{tmp + "/extra-secret"}
	own := []string{tmp + "/daemon-home"}

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name   string
		do     func()
		cached bool // answered without resolving again
		extra  []string
		own    []string
		root   bool // needs root (mounts)
	}{
		{name: "first", do: func() {}},
		{name: "nothing changed", do: func() {}, cached: true},
		{name: "an unrelated file in the home", do: func() { must(os.WriteFile(home+"/notes.txt", nil, 0o644)) }, cached: true},
		{name: "a masked dir appears", do: func() { must(os.Mkdir(home+"/.ssh", 0o700)) }},
		{name: "a file inside a masked dir", do: func() { must(os.WriteFile(home+"/.ssh/id_ed25519", []byte("k"), 0o600)) }, cached: true},
		{name: "a missing ancestor, then the mask beneath it", do: func() {
			must(os.Mkdir(home+"/.config", 0o755))
			must(os.Mkdir(home+"/.config/gcloud", 0o700))
		}},
		{name: "renamed into place", do: func() {
			must(os.MkdirAll(stage+"/.aws", 0o700))
			must(os.WriteFile(stage+"/.aws/credentials", []byte("s"), 0o600))
			must(os.Rename(stage+"/.aws", home+"/.aws"))
		}},
		{name: "an ancestor swapped for one holding a secret", do: func() {
			must(os.MkdirAll(stage+"/conf/gh", 0o700))
			must(os.Rename(home+"/.config", stage+"/oldconf"))
			must(os.Rename(stage+"/conf", home+"/.config"))
		}},
		{name: "a masked dir removed", do: func() { must(os.RemoveAll(home + "/.ssh")) }},
		{name: "a masked file becomes a symlink", do: func() {
			must(os.WriteFile(stage+"/netrc", []byte("machine x"), 0o600))
			must(os.Symlink(stage+"/netrc", home+"/.netrc"))
		}},
		{name: "a symlink on the path is never cached", do: func() {}},
		{name: "symlink gone", do: func() { must(os.Remove(home + "/.netrc")) }},
		{name: "back to cached", do: func() {}, cached: true},
		{name: "the extra masks differ", do: func() {}, extra: extra},
		{name: "an extra mask appears", do: func() { must(os.WriteFile(extra[0], []byte("x"), 0o600)) }, extra: extra},
		{name: "dryexec's default home appears", do: func() { must(os.MkdirAll(home+"/.local/state/dryexec/trials", 0o700)) }},
		{name: "a trial in dryexec's home", do: func() { must(os.Mkdir(home+"/.local/state/dryexec/trials/tr_x", 0o700)) }, cached: true},
		{name: "a daemon's own paths", do: func() {}, own: own},
		{name: "a daemon's home appears", do: func() { must(os.Mkdir(own[0], 0o700)) }, own: own},
		{name: "a daemon's home, cached", do: func() {}, own: own, cached: true},
		{name: "a mount over an ancestor (no inotify event)", root: true, do: func() {
			// .config exists; a tmpfs holding gcloud is mounted over it.
			must(unix.Mount("dryexec-test", stage+"/oldconf", "tmpfs", 0, "size=1m"))
			must(os.Mkdir(stage+"/oldconf/gcloud", 0o700))
			must(unix.Mount(stage+"/oldconf", home+"/.config", "", unix.MS_BIND, ""))
			t.Cleanup(func() {
				unix.Unmount(home+"/.config", unix.MNT_DETACH)
				unix.Unmount(stage+"/oldconf", unix.MNT_DETACH)
			})
		}, extra: extra},
	}
	for _, st := range steps {
		if st.root && os.Getuid() != 0 {
			t.Logf("%s: skipped (mounting needs root)", st.name)
			continue
		}
		st.do()
		_, gen, err := mt.get()
		must(err)
		before := c.resolved
		got, err := c.resolve(slices.Clone(st.extra), false, slices.Clone(st.own), gen)
		must(err)
		want, err := ResolveCover(slices.Clone(st.extra), false, slices.Clone(st.own))
		must(err)
		if !slices.Equal(got.Masks, want.Masks) || !slices.Equal(got.Hidden, want.Hidden) {
			t.Fatalf("%s: cached answer %q, a fresh one %q", st.name, got, want)
		}
		if hit := c.resolved == before; hit != st.cached {
			t.Fatalf("%s: answered from the cache: %v, want %v", st.name, hit, st.cached)
		}
	}
	// The steps above must have exercised real masks, not an empty list.
	got, _ := c.resolve(nil, false, own, 0)
	for _, p := range []string{home + "/.aws", home + "/.config/gcloud"} {
		if !slices.Contains(got.Masks, p) {
			t.Errorf("final masks %q lack %s", got.Masks, p)
		}
	}
	for _, p := range []string{home + "/.local/state/dryexec", own[0]} {
		if !slices.Contains(got.Hidden, p) {
			t.Errorf("final hidden paths %q lack %s", got.Hidden, p)
		}
	}
}
