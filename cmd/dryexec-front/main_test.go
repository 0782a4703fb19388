package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/internal/front"
	"github.com/dryexec/dryexec/internal/runflags"
	"github.com/dryexec/dryexec/internal/testreq"
)

// TestFrontPicksBinary: the front execs the local engine beside it for a
// run, and the engine for anything else — another command, a daemon that
// may answer, a local engine that is not there, an engine named by
// $DRYEXEC_ENGINE — with the
// arguments unchanged (the local engine hands the engine the runs it does
// not take: TestLocalHandsOver, internal/cli). Both are stand-ins that
// say who they are (no daemon answers, so the front handles nothing
// itself).
func TestFrontPicksBinary(t *testing.T) {
	if localName != runflags.LocalName {
		t.Fatalf("the front looks for %s, the local engine is %s", localName, runflags.LocalName)
	}
	goTool := testreq.NeedTool(t, "go")
	dir := t.TempDir()
	fe := filepath.Join(dir, "dryexec")
	build := exec.Command(goTool, "build", "-o", fe, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the front: %v\n%s", err, b)
	}
	stub := func(path, who string) {
		if err := os.WriteFile(path, []byte("#!/bin/sh\necho "+who+" \"$@\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stub(filepath.Join(dir, front.EngineName), "engine")
	stub(filepath.Join(dir, runflags.LocalName), "local")
	named := filepath.Join(t.TempDir(), "named-engine")
	stub(named, "named")
	lone := t.TempDir() // a front and an engine, no local engine
	for _, f := range []string{"dryexec", front.EngineName} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || os.WriteFile(filepath.Join(lone, f), b, 0o755) != nil {
			t.Fatalf("copying %s: %v", f, err)
		}
	}
	for _, tt := range []struct {
		name string
		bin  string
		vars []string
		args []string
		want string
	}{
		{"a run it takes", fe, nil, []string{"run", "--json", "-q", "-C", "/", "--", "true"}, "local"},
		{"--via local", fe, nil, []string{"run", "--via", "local", "--", "true"}, "local"},
		{"--rung: the local engine's to hand over", fe, nil, []string{"run", "--rung", "host", "--", "true"}, "local"},
		{"ls", fe, nil, []string{"ls"}, "engine"},
		{"DRYEXEC_ENGINE", fe, []string{"DRYEXEC_ENGINE=" + named}, []string{"run", "--", "true"}, "named"},
		{"a daemon may answer: the engine's", fe, []string{"DRYEXEC_SOCKET=/nonexistent.sock"}, []string{"run", "--rung", "host", "--", "true"}, "engine"},
		{"no local engine beside it", filepath.Join(lone, "dryexec"), nil, []string{"run", "--", "true"}, "engine"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(tt.bin, tt.args...)
			cmd.Env = append([]string{"PATH=/usr/bin:/bin", "DRYEXEC_HOME=" + t.TempDir(), "XDG_RUNTIME_DIR=" + t.TempDir()}, tt.vars...)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v\n%s", err, errb.String())
			}
			if want := tt.want + " " + strings.Join(tt.args, " ") + "\n"; out.String() != want {
				t.Errorf("ran %q, want %q", out.String(), want)
			}
		})
	}
}
