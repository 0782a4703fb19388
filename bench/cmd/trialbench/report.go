//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// unit says what a group's values are and which way is better.
type unit struct {
	name   string // "ms", "trials/s", "MiB", …
	higher bool   // a higher value is better (rates)
	prec   int    // decimals shown
}

var (
	unitMS  = unit{name: "ms", prec: 2}
	unitMiB = unit{name: "MiB", prec: 1}
)

func rate(name string) unit { return unit{name: name, higher: true} }

func (u unit) format(v float64) string { return fmt.Sprintf("%.*f %s", u.prec, v, u.name) }

// result is one candidate's values, sorted.
type result struct {
	name, label string
	vals        []float64
}

func (r result) median() float64 { return r.vals[len(r.vals)/2] }
func (r result) min() float64    { return r.vals[0] }
func (r result) max() float64    { return r.vals[len(r.vals)-1] }

// machine describes where and when the run happened; the load averages at
// start and end say how busy the machine was.
type machine struct {
	start              time.Time
	cpu                string
	cpus               int
	memGiB             float64
	kernel             string
	uid                int
	loadStart, loadEnd string
}

func describeMachine() machine {
	m := machine{start: time.Now().UTC(), cpus: runtime.NumCPU(), uid: os.Getuid(), loadStart: loadavg()}
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	m.kernel = "Linux " + strings.TrimSpace(string(b))
	m.cpu = procField("/proc/cpuinfo", "model name")
	var kb float64
	fmt.Sscanf(procField("/proc/meminfo", "MemTotal"), "%f", &kb)
	m.memGiB = kb / (1 << 20)
	return m
}

// procField is the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func (m machine) String() string {
	return fmt.Sprintf("%s/%s, %d CPUs (%s), %.0f GiB, %s, uid %d", runtime.GOOS, runtime.GOARCH, m.cpus, m.cpu, m.memGiB, m.kernel, m.uid)
}

func formatReport(m machine, cfg config, groups []group, sections [][]result, phases map[string][]time.Duration) string {
	var b strings.Builder
	b.WriteString("# dryexec benchmarks\n\n")
	if cfg.note != "" {
		fmt.Fprintf(&b, "**%s**\n\n", cfg.note)
	}
	fmt.Fprintf(&b, "%s; %s; %d interleaved rounds per candidate; load average %s at the start, %s at the end.\n"+
		"Medians with min and max; each ratio is the candidate's median over the baseline's median, in the row's unit "+
		"(for times lower is better, for rates higher is better). How to read it: docs/benchmarks.md.\n\n",
		m.start.Format(time.RFC3339), m, cfg.rounds, m.loadStart, m.loadEnd)
	for si, res := range sections {
		g := groups[si]
		fmt.Fprintf(&b, "## %s\n\n", g.title)
		if res == nil {
			fmt.Fprintf(&b, "Not measured: %s\n\n", g.note)
			continue
		}
		b.WriteString("| candidate | median | min | max |")
		for _, bi := range g.bases {
			fmt.Fprintf(&b, " × %s |", res[bi].short())
		}
		b.WriteString("\n|---|---:|---:|---:|" + strings.Repeat("---:|", len(g.bases)) + "\n")
		for _, r := range res {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |", r.name, g.unit.format(r.median()), g.unit.format(r.min()), g.unit.format(r.max()))
			for _, bi := range g.bases {
				fmt.Fprintf(&b, " %.2f |", r.median()/res[bi].median())
			}
			b.WriteString("\n")
		}
		if g.note != "" {
			fmt.Fprintf(&b, "\n%s\n", g.note)
		}
		if g.extra != nil {
			fmt.Fprintf(&b, "\n%s\n", g.extra())
		}
		b.WriteString("\n")
	}
	if len(phases) == 0 {
		return b.String()
	}
	b.WriteString("## Where an in-process cold trial's time goes (median time since Trial() was called)\n\n| phase | median |\n|---|---:|\n")
	for _, p := range []string{"start", "hello", "view", "exit", "done", "pipes", "net", "reaped", "cleaned"} {
		d := phases[p]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		fmt.Fprintf(&b, "| %s | %s |\n", p, unitMS.format(msOf(d[len(d)/2])))
	}
	b.WriteString("\nstart: guest process cloned into its namespaces; hello: the guest's Go runtime is up;\n" +
		"view: overlays, /proc, /dev mounted and pivoted; exit: the command ran and everything it\n" +
		"started is dead; done: upper dirs walked, hashed and diffed into the delta; net: netsim stopped and its log in the delta;\n" +
		"reaped: the guest (PID 1 of the sandbox's namespaces) killed and waited for, its namespaces torn down;\n" +
		"cleaned: netsim and the trial's cgroups gone too (Trial returns).\n")
	return b.String()
}

// short is a row's label, else its name up to its first space or colon: what a ratio column
// is headed with.
func (r result) short() string {
	if r.label != "" {
		return r.label
	}
	if i := strings.IndexAny(r.name, " :"); i > 0 {
		return r.name[:i]
	}
	return r.name
}
