package vm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/cli"
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/rung/vm"
)

// cliRun runs `dryexec run --json --rung RUNG ARGS…` in-process with a
// private DRYEXEC_HOME and returns its exit code and delta.
func cliRun(t *testing.T, home, rungName, stdin string, args ...string) (int, *dryexec.StateDelta) {
	t.Helper()
	var out, errb bytes.Buffer
	env := map[string]string{"DRYEXEC_HOME": home, "PATH": "/usr/local/bin:/usr/bin:/bin", "NO_COLOR": "1", "HOME": os.Getenv("HOME")}
	code := cli.Run(context.Background(), append([]string{"run", "--json", "--rung", rungName}, args...),
		cli.Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }})
	if code == cli.ExitInternal || code == cli.ExitUsage {
		t.Fatalf("dryexec run --rung %s %q: exit %d: %s", rungName, args, code, errb.String())
	}
	var d dryexec.StateDelta
	if err := json.Unmarshal(out.Bytes(), &d); err != nil {
		t.Fatalf("--rung %s: not a delta: %v\n%s\n%s", rungName, err, out.String(), errb.String())
	}
	return code, &d
}

// requireVM builds the static guest, points DRYEXEC_GUEST at it and skips
// (or, where required, fails) unless both ns and vm run here.
func requireVM(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots VMs")
	}
	if os.Getenv("DRYEXEC_TEST_VM") == "" {
		// A VM boot per trial: minutes under TCG. `make test-vm` runs it.
		t.Skip("set DRYEXEC_TEST_VM=1 (make test-vm) to run it")
	}
	// The initramfs has no libc, and this test binary may be dynamic.
	t.Setenv(guestexe.Env, vm.StaticGuest(t))
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	testreq.Need(t, testreq.VM, (&vm.Rung{}).Available(context.Background()))
}

// comparable is what must be equal between two rungs' deltas of one
// command: everything but timing, ids, the rung's name, measured memory and
// CPU, warnings (the vm's names its accelerator) and the mtimes of what the
// command made now (a set mtime, touch -d, is compared).
type comparable struct {
	Files      []dryexec.FileChange
	Touched    []dryexec.FileChange
	Process    dryexec.Process
	Violations []dryexec.Violation
	Totals     dryexec.Totals
	Incomplete bool
	Decision   string
	Reasons    []string
}

func comparableOf(d *dryexec.StateDelta, dir string, setMtimes map[string]bool) comparable {
	c := comparable{Process: d.Process, Violations: d.Violations, Totals: d.Totals, Incomplete: d.Incomplete,
		Decision: string(d.Decision.Choice)}
	c.Reasons = append(c.Reasons, d.Decision.Reasons...)
	c.Process.DurationNS, c.Process.CPUUserNS, c.Process.CPUSysNS, c.Process.PeakRSSBytes = 0, 0, 0, 0
	for _, f := range d.Files {
		if !setMtimes[filepath.Base(f.Path)] {
			f.MtimeNS = min(f.MtimeNS, 1)
		}
		c.Files = append(c.Files, f)
	}
	for _, f := range d.Touched {
		if !setMtimes[filepath.Base(f.Path)] {
			f.MtimeNS = min(f.MtimeNS, 1)
		}
		if f.Path != dir && !strings.HasPrefix(f.Path, dir+"/") && f.Kind == dryexec.KindDir {
			// A shared host dir (/tmp): touched or not depends on others.
			continue
		}
		c.Touched = append(c.Touched, f)
	}
	return c
}

// TestSameDeltaAsNS runs the same commands through `dryexec run --rung ns`
// and `--rung vm` in the same directory and requires the same delta, field
// by field (timing aside).
func TestSameDeltaAsNS(t *testing.T) {
	requireVM(t)
	secrets := t.TempDir()
	os.WriteFile(filepath.Join(secrets, "key"), []byte("hunter2\n"), 0o600)
	cases := []struct {
		name      string
		args      []string
		stdin     string
		setMtimes map[string]bool
	}{
		{name: "files", args: []string{"--", "sh", "-c", `echo new > a.txt; printf 'x\000y' > bin; echo more >> keep.txt; rm gone.txt;
			chmod 755 s.sh; mkdir -p d/e; ln -s keep.txt l; ln keep.txt hard; truncate -s 10M sparse;
			touch -d @1700000000 a.txt; mv sub sub2; rm -r del; echo x > /tmp/dryexec-vm-compare`},
			setMtimes: map[string]bool{"a.txt": true}},
		{name: "touch", args: []string{"--", "sh", "-c", "touch -d @1600000000 keep.txt; touch gone.txt; cat s.sh > /dev/null"},
			setMtimes: map[string]bool{"keep.txt": true}},
		{name: "exit", args: []string{"--", "sh", "-c", "echo out; echo err >&2; exit 3"}},
		{name: "signal", args: []string{"--", "sh", "-c", "echo before; kill -TERM $$"}},
		{name: "timeout", args: []string{"--timeout", "2s", "--", "sh", "-c", "echo started; sleep 30"}},
		{name: "not_found", args: []string{"--", "no-such-command-dryexec"}},
		{name: "cwd_relative", args: []string{"--", "./s.sh"}},
		{name: "stdin", args: []string{"--stdin", "--", "sh", "-c", "cat > in.txt; wc -c < in.txt"}, stdin: "hello\n"},
		{name: "daemon", args: []string{"--", "sh", "-c", "(sleep 60 > /dev/null 2>&1 &); echo left"}},
		{name: "output_cap", args: []string{"--output-cap", "1000", "--", "sh", "-c", "head -c 300000 /dev/zero | tr '\\0' a"}},
		{name: "mask", args: []string{"--mask", secrets, "--", "sh", "-c", "ls -a " + secrets + "; cat " + secrets + "/key | wc -c"}},
		{name: "own_state", args: []string{"--env", "H={home}", "--", "sh", "-c",
			`ls -A "$H"; echo ls=$?; cat "$H/secret.txt"; echo cat=$?; echo x > "$H/new"; echo write=$?`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range map[string]string{"keep.txt": "keep\n", "gone.txt": "gone\n", "s.sh": "#!/bin/sh\necho hi\n",
				"sub/x": "x\n", "del/y": "y\n"} {
				os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
				os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
			}
			os.Chmod(filepath.Join(dir, "s.sh"), 0o755)
			if c.name == "files" {
				os.Chmod(filepath.Join(dir, "s.sh"), 0o644)
			}
			home := t.TempDir()
			os.WriteFile(filepath.Join(home, "secret.txt"), []byte("hunter2\n"), 0o600)
			args := append([]string{"-C", dir, "--no-store"}, c.args...)
			for i := range args {
				args[i] = strings.ReplaceAll(args[i], "{home}", home)
			}
			before := snapshot(t, dir)
			nsCode, nsD := cliRun(t, home, linuxns.Name, c.stdin, args...)
			vmCode, vmD := cliRun(t, home, vm.Name, c.stdin, args...)
			if after := snapshot(t, dir); after != before {
				t.Errorf("the host's dir changed:\n%s\n--- after ---\n%s", before, after)
			}
			if c.name == "own_state" && (strings.Contains(vmD.Process.Stdout, "secret.txt") || strings.Contains(vmD.Process.Stdout, "hunter2") ||
				strings.Contains(vmD.Process.Stdout, "write=0")) {
				t.Errorf("dryexec's own state reached the VM:\n%s", vmD.Process.Stdout)
			}
			if vmD.Rung != vm.Name || nsD.Rung != linuxns.Name {
				t.Fatalf("rungs %q and %q", nsD.Rung, vmD.Rung)
			}
			if nsCode != vmCode {
				t.Errorf("exit %d on ns, %d on vm", nsCode, vmCode)
			}
			ns, v := comparableOf(nsD, dir, c.setMtimes), comparableOf(vmD, dir, c.setMtimes)
			if !reflect.DeepEqual(ns, v) {
				t.Errorf("deltas differ:\n%s", diffFields(ns, v))
			}
			if len(nsD.Files) == 0 && c.name == "files" {
				t.Fatal("the files case changed nothing")
			}
		})
	}
}

// snapshot lists dir's tree with each entry's mode, size and content.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var sb strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(&sb, "%s %v %d", p, fi.Mode(), fi.Size())
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			fmt.Fprintf(&sb, " %q", b)
		}
		sb.WriteByte('\n')
		return nil
	})
	return sb.String()
}

// diffFields lists the fields of a and b that differ, as JSON.
func diffFields(a, b comparable) string {
	var sb strings.Builder
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		x, y := va.Field(i).Interface(), vb.Field(i).Interface()
		if reflect.DeepEqual(x, y) {
			continue
		}
		if xs, ok := x.([]dryexec.FileChange); ok {
			ys := y.([]dryexec.FileChange)
			for j := range max(len(xs), len(ys)) {
				var xj, yj any
				if j < len(xs) {
					xj = xs[j]
				}
				if j < len(ys) {
					yj = ys[j]
				}
				if !reflect.DeepEqual(xj, yj) {
					bx, _ := json.Marshal(xj)
					by, _ := json.Marshal(yj)
					fmt.Fprintf(&sb, "%s[%d]:\n  ns: %s\n  vm: %s\n", va.Type().Field(i).Name, j, bx, by)
				}
			}
			continue
		}
		bx, _ := json.Marshal(x)
		by, _ := json.Marshal(y)
		fmt.Fprintf(&sb, "%s:\n  ns: %s\n  vm: %s\n", va.Type().Field(i).Name, bx, by)
	}
	return sb.String()
}
