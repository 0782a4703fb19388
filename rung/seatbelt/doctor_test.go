package seatbelt

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// TestMissing: doctor names exactly what the host lacks, each in words a
// user can act on, and nothing when the host has it all.
func TestMissing(t *testing.T) {
	ok := func(string) error { return nil }
	probeOK := func(context.Context) error { return nil }
	apfs := func(string) (string, error) { return "apfs", nil }
	goOK := func(string) (string, error) { return "/usr/local/go/bin/go", nil }
	for _, c := range []struct {
		name string
		l    Lookups
		want []string // a substring of each finding, in order
	}{
		{"all there", Lookups{Executable: ok, Probe: probeOK, FSType: apfs, LookPath: goOK}, nil},
		{"no sandbox-exec", Lookups{Executable: func(p string) error {
			if p != SandboxExec {
				t.Errorf("looked for %s", p)
			}
			return fs.ErrNotExist
		}, Probe: func(context.Context) error { t.Error("probed a missing sandbox-exec"); return nil }, FSType: apfs, LookPath: goOK},
			[]string{"sandbox-exec (/usr/bin/sandbox-exec: file does not exist)"}},
		{"sandbox-exec refuses", Lookups{Executable: ok, Probe: func(context.Context) error { return errors.New("exit status 65") }, FSType: apfs, LookPath: goOK},
			[]string{"a working sandbox-exec (/usr/bin/sandbox-exec with an allow-all profile failed: exit status 65)"}},
		{"not apfs", Lookups{Executable: ok, Probe: probeOK, FSType: func(string) (string, error) { return "hfs", nil }, LookPath: goOK, Dir: "/Volumes/old"},
			[]string{"APFS at /Volumes/old (it is hfs)"}},
		{"statfs fails", Lookups{Executable: ok, Probe: probeOK, FSType: func(string) (string, error) { return "", fs.ErrPermission }, LookPath: goOK, Dir: "/x"},
			[]string{"APFS at /x (its filesystem could not be read"}},
		{"no go", Lookups{Executable: ok, Probe: probeOK, FSType: apfs, LookPath: func(string) (string, error) { return "", errors.New("not found") }},
			[]string{"a Go toolchain"}},
		{"nothing", Lookups{Executable: func(string) error { return fs.ErrNotExist }, FSType: func(string) (string, error) { return "msdos", nil },
			LookPath: func(string) (string, error) { return "", errors.New("not found") }, Dir: "/Volumes/USB"},
			[]string{"sandbox-exec", "APFS at /Volumes/USB (it is msdos)", "a Go toolchain"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Missing(context.Background(), c.l)
			if len(got) != len(c.want) {
				t.Fatalf("findings %q, want %d matching %q", got, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("finding %d is %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
}
