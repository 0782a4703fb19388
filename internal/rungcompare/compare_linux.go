package rungcompare

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/cli"
)

// CLIRun runs `dryexec run --json --rung RUNG ARGS…` in-process with a
// private DRYEXEC_HOME and returns its exit code and delta.
func CLIRun(t *testing.T, home, rungName, stdin string, args ...string) (int, *dryexec.StateDelta) {
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

// Comparable is what must be equal between two rungs' deltas of one
// command: everything but timing, ids, the rung's name, warnings (a rung
// names itself in them), measured memory and CPU, and the mtimes of what
// the command made now (each run makes them at its own time; a set mtime,
// touch -d, is compared).
type Comparable struct {
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

// Of is d's Comparable; dir is the command's directory, setMtimes the base
// names whose mtimes the command set.
func Of(d *dryexec.StateDelta, dir string, setMtimes map[string]bool) Comparable {
	c := Comparable{Process: d.Process, Violations: d.Violations, Network: d.Network, Totals: d.Totals, Incomplete: d.Incomplete,
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

// IgnoreSizes drops what depends on how much fits in the write budget.
func (c *Comparable) IgnoreSizes() {
	c.Totals.BytesWritten, c.Reasons = 0, nil
	for i := range c.Files {
		c.Files[i].Size, c.Files[i].SHA256 = 0, ""
	}
}

// DiffFields lists the fields of a (named an) and b (named bn) that differ,
// as JSON.
func DiffFields(a, b Comparable, an, bn string) string {
	var sb strings.Builder
	w := max(len(an), len(bn)) + 1
	line := func(field string, x, y any) {
		bx, _ := json.Marshal(x)
		by, _ := json.Marshal(y)
		fmt.Fprintf(&sb, "%s:\n  %-*s %s\n  %-*s %s\n", field, w, an+":", bx, w, bn+":", by)
	}
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		x, y := va.Field(i).Interface(), vb.Field(i).Interface()
		if reflect.DeepEqual(x, y) {
			continue
		}
		name := va.Type().Field(i).Name
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
					line(fmt.Sprintf("%s[%d]", name, j), xj, yj)
				}
			}
			continue
		}
		line(name, x, y)
	}
	return sb.String()
}

// Case is one command both rungs run.
type Case struct {
	Name  string
	Args  []string // after the rung's flags; "--" and the command included
	Stdin string
	// SetMtimes are the base names whose mtimes the command sets.
	SetMtimes map[string]bool
	// SizesDiffer: how much fits in the write budget differs (the ns
	// guest's scratch tmpfs holds its /dev and root too).
	SizesDiffer bool
	// Net: the case uses the network.
	Net bool
	// Stdout, when set, is what the command must print (on both rungs: the
	// deltas are compared too).
	Stdout string
	// FIFO: the case makes FIFOs.
	FIFO bool
}

// Cases are the commands of TestSameDeltaAsNS: files of every kind, how a
// command ends, its input and output, masks, dryexec's own state, the
// network. In Args, {secrets} is a dir with a secret key, {home} the runs'
// DRYEXEC_HOME, {mock} a mock file, {rung} the rung compared.
func Cases() []Case {
	return []Case{
		{Name: "files", Args: []string{"--", "sh", "-c", `echo new > a.txt; printf 'x\000y' > bin; echo more >> keep.txt; rm gone.txt;
			chmod 755 s.sh; mkdir -p d/e; ln -s keep.txt l; ln keep.txt hard; truncate -s 10M sparse;
			touch -d @1700000000 a.txt; mv sub sub2; rm -r del; echo x > /tmp/dryexec-{rung}-compare`},
			SetMtimes: map[string]bool{"a.txt": true}},
		{Name: "touch", Args: []string{"--", "sh", "-c", "touch -d @1600000000 keep.txt; touch gone.txt; cat s.sh > /dev/null"},
			SetMtimes: map[string]bool{"keep.txt": true}},
		// FIFOs made by mkfifo (in the cwd, a new dir, a host dir) and by
		// mknodat, moved, used, given a mode and an mtime, in a dir whose
		// mtime is set after (gVisor keeps them in its own memory: its
		// trial guest reports them).
		{Name: "fifo", FIFO: true, Args: []string{"--", "sh", "-c", `mkfifo p; mkdir -p n/m; mkfifo -m 0600 n/m/q; mkfifo sub/h;
			mkfifo r && mv r sub/r2; python3 -c 'import os; os.mknod("k", 0o10640, dir_fd=os.open("n", os.O_RDONLY))';
			chmod 0604 p; touch -d @1600000000 sub/h; mkdir t; mkfifo t/f; touch -d @1500000000 t;
			cat p > got & echo through > p; wait; cat got`},
			SetMtimes: map[string]bool{"h": true, "t": true}},
		{Name: "exit", Args: []string{"--", "sh", "-c", "echo out; echo err >&2; exit 3"}},
		{Name: "signal", Args: []string{"--", "sh", "-c", "echo before; kill -TERM $$"}},
		{Name: "timeout", Args: []string{"--timeout", "1s", "--", "sh", "-c", "echo started; sleep 30"}},
		{Name: "not_found", Args: []string{"--", "no-such-command-dryexec"}},
		{Name: "cwd_relative", Args: []string{"--", "./s.sh"}},
		{Name: "stdin", Args: []string{"--stdin", "--", "sh", "-c", "cat > in.txt; wc -c < in.txt"}, Stdin: "hello\n"},
		{Name: "daemon", Args: []string{"--", "sh", "-c", "(sleep 60 > /dev/null 2>&1 &); echo left"}},
		{Name: "output_cap", Args: []string{"--output-cap", "1000", "--", "sh", "-c", "head -c 300000 /dev/zero | tr '\\0' a"}},
		{Name: "mask", Args: []string{"--mask", "{secrets}", "--", "sh", "-c", "ls -a {secrets}; cat {secrets}/key | wc -c"}},
		// dryexec's own state (DRYEXEC_HOME) is hidden whole: no names, no
		// content, no writes.
		{Name: "own_state", Args: []string{"--env", "H={home}", "--", "sh", "-c",
			`ls -A "$H"; echo ls=$?; cat "$H/secret.txt"; echo cat=$?; echo x > "$H/new"; echo write=$?`}},
		// The network goes through netsim on both: every attempt logged,
		// nothing but mocks answered; DNS is netsim's. No allow rule: no
		// packet can leave netsim.
		{Name: "net_none", Net: true, Args: []string{"--", "sh", "-c",
			"curl -sS -m 10 http://api.example.com/v1/ping; echo rc=$?; getent hosts api.example.com >/dev/null; echo dns=$?"}},
		{Name: "net_mock", Net: true, Args: []string{"--net", "mock:{mock}", "--", "sh", "-c",
			"curl -sS -m 10 https://api.example.com/v1/ping; echo; curl -sS -m 10 -o /dev/null -w '%{http_code}' http://api.example.com/other; echo; curl -sS -m 5 http://other.example.org/; echo rc=$?"}},
		{Name: "upper_full", Args: []string{"--upper-size", "4194304", "--", "sh", "-c", "dd if=/dev/zero of=big bs=1M count=8 2>/dev/null; echo $?"}, SizesDiffer: true},
	}
}

// Fixture makes the directory every case runs in: files to keep, change,
// remove and rename, and a script.
func Fixture(t *testing.T, caseName string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{"keep.txt": "keep\n", "gone.txt": "gone\n", "s.sh": "#!/bin/sh\necho hi\n",
		"sub/x": "x\n", "del/y": "y\n"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
	}
	os.Chmod(filepath.Join(dir, "s.sh"), 0o755)
	if caseName == "files" {
		os.Chmod(filepath.Join(dir, "s.sh"), 0o644)
	}
	return dir
}

// SameDeltaAsNS runs each case through `dryexec run --rung ns` and `--rung
// name` in the same directory and requires the same delta, field by field
// (timing aside): files (content hashes, diffs, modes, owners, links, link
// groups, kinds, set mtimes), process (exit code, signal, timeout, output
// and its truncation), violations, network, totals and decision; and that
// the host's directory is left as it was.
func SameDeltaAsNS(t *testing.T, name string, cases []Case) {
	secrets := t.TempDir()
	os.WriteFile(filepath.Join(secrets, "key"), []byte("hunter2\n"), 0o600)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			dir := Fixture(t, c.Name)
			// One DRYEXEC_HOME for both runs (its path may be in the output).
			home := t.TempDir()
			os.WriteFile(filepath.Join(home, "secret.txt"), []byte("hunter2\n"), 0o600)
			mock := filepath.Join(home, "mock.yaml")
			os.WriteFile(mock, []byte("routes:\n  - host: api.example.com\n    path: /v1/ping\n    json: {pong: true}\n"), 0o644)
			args := append([]string{"-C", dir, "--no-store"}, c.Args...)
			for i := range args {
				args[i] = strings.NewReplacer("{home}", home, "{mock}", mock, "{secrets}", secrets, "{rung}", name).Replace(args[i])
			}
			before := Snapshot(t, dir)
			nsCode, nsD := CLIRun(t, home, "ns", c.Stdin, args...)
			code, d := CLIRun(t, home, name, c.Stdin, args...)
			if after := Snapshot(t, dir); after != before {
				t.Errorf("the host's dir changed:\n%s\n--- after ---\n%s", before, after)
			}
			if c.Name == "own_state" && (strings.Contains(d.Process.Stdout, "secret.txt") || strings.Contains(d.Process.Stdout, "hunter2") ||
				strings.Contains(d.Process.Stdout, "write=0")) {
				t.Errorf("dryexec's own state reached the %s sandbox:\n%s", name, d.Process.Stdout)
			}
			if d.Rung != name || nsD.Rung != "ns" {
				t.Fatalf("rungs %q and %q", nsD.Rung, d.Rung)
			}
			if nsCode != code {
				t.Errorf("exit %d on ns, %d on %s", nsCode, code, name)
			}
			ns, other := Of(nsD, dir, c.SetMtimes), Of(d, dir, c.SetMtimes)
			if c.SizesDiffer {
				ns.IgnoreSizes()
				other.IgnoreSizes()
			}
			if !reflect.DeepEqual(ns, other) {
				t.Errorf("deltas differ:\n%s", DiffFields(ns, other, "ns", name))
			}
			if len(nsD.Files) == 0 && c.Name == "files" {
				t.Fatal("the files case changed nothing")
			}
		})
	}
}

// Without returns cases but those drop says to leave out.
func Without(cases []Case, drop func(Case) bool) []Case {
	return slices.DeleteFunc(slices.Clone(cases), drop)
}

// Snapshot lists dir's tree with each entry's mode, size and content.
func Snapshot(t *testing.T, dir string) string {
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
