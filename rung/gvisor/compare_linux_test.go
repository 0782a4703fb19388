package gvisor_test

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
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/rung/linuxns"
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

// comparable is what must be equal between two rungs' deltas of one
// command: everything but timing, ids, the rung's name, measured memory and
// CPU, and the mtimes of what the command made now (each run makes them at
// its own time; a set mtime, touch -d, is compared).
type comparable struct {
	Files      []dryexec.FileChange
	Touched    []dryexec.FileChange
	Process    dryexec.Process
	Violations []dryexec.Violation
	Network    []dryexec.NetworkEvent
	Totals     dryexec.Totals
	Incomplete bool
	Decision   string
	Reasons    []string
	Env        map[string]string
}

func comparableOf(d *dryexec.StateDelta, dir string, setMtimes map[string]bool) comparable {
	c := comparable{Process: d.Process, Violations: d.Violations, Network: d.Network, Totals: d.Totals, Incomplete: d.Incomplete,
		Decision: string(d.Decision.Choice), Env: d.Action.Env}
	c.Reasons = append(c.Reasons, d.Decision.Reasons...)
	c.Process.DurationNS, c.Process.CPUUserNS, c.Process.CPUSysNS, c.Process.PeakRSSBytes = 0, 0, 0, 0
	for _, f := range d.Files {
		if !setMtimes[filepath.Base(f.Path)] {
			f.MtimeNS = min(f.MtimeNS, 1) // present or not
		}
		c.Files = append(c.Files, f)
	}
	for _, f := range d.Touched {
		if !setMtimes[filepath.Base(f.Path)] {
			f.MtimeNS = min(f.MtimeNS, 1)
		}
		if f.Path != dir && !strings.HasPrefix(f.Path, dir+"/") && f.Kind == dryexec.KindDir {
			// A shared host dir (/tmp): whether it counts as touched
			// depends on when others last wrote into it (a dir is touched
			// only when the trial left it later than the host's).
			continue
		}
		c.Touched = append(c.Touched, f)
	}
	return c
}

// TestSameDeltaAsNS runs the same commands through `dryexec run --rung ns`
// and `--rung gvisor` in the same directory and requires the same delta,
// field by field (timing aside): files (content hashes, diffs, modes, owners,
// links, link groups, kinds, set mtimes), process (exit code, signal,
// timeout, output and its truncation), violations, totals and decision.
func TestSameDeltaAsNS(t *testing.T) {
	requireBoth(t)
	secrets := t.TempDir()
	os.WriteFile(filepath.Join(secrets, "key"), []byte("hunter2\n"), 0o600)
	cases := []struct {
		name      string
		args      []string // after the rung's flags; "--" and the command included
		stdin     string
		setMtimes map[string]bool
		// sizesDiffer: how much fits in the write budget differs (the ns
		// guest's scratch tmpfs holds its /dev and root too).
		sizesDiffer bool
	}{
		{name: "files", args: []string{"--", "sh", "-c", `echo new > a.txt; printf 'x\000y' > bin; echo more >> keep.txt; rm gone.txt;
			chmod 755 s.sh; mkdir -p d/e; ln -s keep.txt l; ln keep.txt hard; truncate -s 10M sparse;
			touch -d @1700000000 a.txt; mv sub sub2; rm -r del; echo x > /tmp/dryexec-gvisor-compare`},
			setMtimes: map[string]bool{"a.txt": true}},
		{name: "touch", args: []string{"--", "sh", "-c", "touch -d @1600000000 keep.txt; touch gone.txt; cat s.sh > /dev/null"},
			setMtimes: map[string]bool{"keep.txt": true}},
		{name: "exit", args: []string{"--", "sh", "-c", "echo out; echo err >&2; exit 3"}},
		{name: "signal", args: []string{"--", "sh", "-c", "echo before; kill -TERM $$"}},
		{name: "timeout", args: []string{"--timeout", "1s", "--", "sh", "-c", "echo started; sleep 30"}},
		{name: "not_found", args: []string{"--", "no-such-command-dryexec"}},
		{name: "cwd_relative", args: []string{"--", "./s.sh"}},
		{name: "stdin", args: []string{"--stdin", "--", "sh", "-c", "cat > in.txt; wc -c < in.txt"}, stdin: "hello\n"},
		{name: "daemon", args: []string{"--", "sh", "-c", "(sleep 60 > /dev/null 2>&1 &); echo left"}},
		{name: "output_cap", args: []string{"--output-cap", "1000", "--", "sh", "-c", "head -c 300000 /dev/zero | tr '\\0' a"}},
		{name: "mask", args: []string{"--mask", secrets, "--", "sh", "-c", "ls -a " + secrets + "; cat " + secrets + "/key | wc -c"}},
		// dryexec's own state (DRYEXEC_HOME) is hidden whole: no names, no
		// content, no writes.
		{name: "own_state", args: []string{"--env", "H={home}", "--", "sh", "-c",
			`ls -A "$H"; echo ls=$?; cat "$H/secret.txt"; echo cat=$?; echo x > "$H/new"; echo write=$?`}},
		// The network goes through netsim on both: every attempt logged,
		// nothing but mocks answered; DNS is netsim's. No allow rule: no
		// packet can leave netsim.
		{name: "net_none", args: []string{"--", "sh", "-c",
			"curl -sS -m 10 http://api.example.com/v1/ping; echo rc=$?; getent hosts api.example.com >/dev/null; echo dns=$?"}},
		{name: "net_mock", args: []string{"--net", "mock:{mock}", "--", "sh", "-c",
			"curl -sS -m 10 https://api.example.com/v1/ping; echo; curl -sS -m 10 -o /dev/null -w '%{http_code}' http://api.example.com/other; echo; curl -sS -m 5 http://other.example.org/; echo rc=$?"}},
		{name: "upper_full", args: []string{"--upper-size", "4194304", "--", "sh", "-c", "dd if=/dev/zero of=big bs=1M count=8 2>/dev/null; echo $?"}, sizesDiffer: true},
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
			// One DRYEXEC_HOME for both runs (its path may be in the output).
			home := t.TempDir()
			os.WriteFile(filepath.Join(home, "secret.txt"), []byte("hunter2\n"), 0o600)
			args := append([]string{"-C", dir, "--no-store"}, c.args...)
			mock := filepath.Join(home, "mock.yaml")
			os.WriteFile(mock, []byte("routes:\n  - host: api.example.com\n    path: /v1/ping\n    json: {pong: true}\n"), 0o644)
			for i := range args {
				args[i] = strings.NewReplacer("{home}", home, "{mock}", mock).Replace(args[i])
			}
			nsCode, nsD := cliRun(t, home, linuxns.Name, c.stdin, args...)
			gvCode, gvD := cliRun(t, home, gvisor.Name, c.stdin, args...)
			if c.name == "own_state" && (strings.Contains(gvD.Process.Stdout, "secret.txt") || strings.Contains(gvD.Process.Stdout, "hunter2") ||
				strings.Contains(gvD.Process.Stdout, "write=0")) {
				t.Errorf("dryexec's own state reached the gvisor sandbox:\n%s", gvD.Process.Stdout)
			}
			if gvD.Rung != gvisor.Name || nsD.Rung != linuxns.Name {
				t.Fatalf("rungs %q and %q", nsD.Rung, gvD.Rung)
			}
			if nsCode != gvCode {
				t.Errorf("exit %d on ns, %d on gvisor", nsCode, gvCode)
			}
			ns, gv := comparableOf(nsD, dir, c.setMtimes), comparableOf(gvD, dir, c.setMtimes)
			if c.sizesDiffer {
				for _, x := range []*comparable{&ns, &gv} {
					x.Totals.BytesWritten, x.Reasons = 0, nil
					for i := range x.Files {
						x.Files[i].Size, x.Files[i].SHA256 = 0, ""
					}
				}
			}
			if !reflect.DeepEqual(ns, gv) {
				t.Errorf("deltas differ:\n%s", diffFields(ns, gv))
			}
			if len(nsD.Files) == 0 && c.name == "files" {
				t.Fatal("the files case changed nothing")
			}
		})
	}
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
		if xs, ok := x.([]dryexec.FileChange); ok && len(xs)+len(y.([]dryexec.FileChange)) > 0 {
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
					fmt.Fprintf(&sb, "Files[%d]:\n  ns:     %s\n  gvisor: %s\n", j, bx, by)
				}
			}
			continue
		}
		bx, _ := json.Marshal(x)
		by, _ := json.Marshal(y)
		fmt.Fprintf(&sb, "%s:\n  ns:     %s\n  gvisor: %s\n", va.Type().Field(i).Name, bx, by)
	}
	return sb.String()
}

// requireBoth skips unless both rungs run here (fails where gvisor is
// required and missing).
func requireBoth(t *testing.T) {
	t.Helper()
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	testreq.Need(t, testreq.GVisor, (&gvisor.Rung{}).Available(context.Background()))
}
