// Package render owns turning a StateDelta into text a person reads: the summary
// `dryexec run` and `dryexec show` print, with coloured unified diffs for small text
// files when the terminal wants colour.
//
// Everything a trial produced (paths, link targets, stdout, stderr, diffs, network
// URLs, violation details, even the argv it was given) is untrusted: it is printed
// only after terminal control characters have been escaped, so a trial cannot move
// the cursor, retitle the window or hide lines in the user's terminal. Colour codes
// are added by this package after that escaping, never taken from the delta.
package render

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fatih/color"
	"github.com/mattn/go-isatty"

	"github.com/dryexec/dryexec"
)

// DefaultMaxDiffLines is the number of lines of one file's diff printed when
// Options.MaxDiffLines is 0.
const DefaultMaxDiffLines = 200

// Options controls Summary.
type Options struct {
	// Color adds ANSI colour codes. Decide it with ColorWanted.
	Color bool
	// MaxDiffLines is how many lines of each file's diff are printed before the
	// rest is cut with a note. 0 means DefaultMaxDiffLines; negative means no limit.
	MaxDiffLines int
	// MaxFileLines bounds the list of changes: a delta with more changes is
	// shown grouped by directory, large subtrees collapsed to a line of
	// counts, in at most about this many lines, without diffs, ending with
	// how to see every change (`dryexec show ID --files`). 0 means
	// DefaultMaxFileLines; negative means every change, with its diff.
	MaxFileLines int
	// OutputShown says the process's stdout and stderr were already shown
	// as it ran (dryexec run's live output): the summary does not repeat
	// them.
	OutputShown bool
	// NoCommands leaves out the closing line of CLI commands (dryexec
	// commit/discard): for a reader that acts through other means, such as
	// an agent calling MCP tools, which says its own next steps.
	NoCommands bool
}

// ColorWanted reports whether output to f should be coloured: only when f is a
// terminal, NO_COLOR is unset or empty (https://no-color.org) and TERM is not
// "dumb". env looks up environment variables; nil means os.Getenv.
func ColorWanted(f *os.File, env func(string) string) bool {
	if f == nil {
		return false
	}
	fd := f.Fd()
	return ColorWantedOn(isatty.IsTerminal(fd) || isatty.IsCygwinTerminal(fd), env)
}

// ColorWantedOn is ColorWanted for output that goes to a terminal exactly
// when terminal is true: another process's stream, which the small front
// reports to the daemon.
func ColorWantedOn(terminal bool, env func(string) string) bool {
	if env == nil {
		env = os.Getenv
	}
	return terminal && env("NO_COLOR") == "" && env("TERM") != "dumb"
}

// palette holds this call's colours. Each is a fresh color.Color whose state is
// set explicitly, so neither fatih/color's global NoColor nor its NO_COLOR probe
// (which reads the process's environment, not ours) decides anything.
type palette struct {
	bold, green, red, cyan, yellow *color.Color
}

func newPalette(on bool) palette {
	p := palette{
		bold:   color.New(color.Bold),
		green:  color.New(color.FgGreen),
		red:    color.New(color.FgRed),
		cyan:   color.New(color.FgCyan),
		yellow: color.New(color.FgYellow),
	}
	for _, c := range []*color.Color{p.bold, p.green, p.red, p.cyan, p.yellow} {
		if on {
			c.EnableColor()
		} else {
			c.DisableColor()
		}
	}
	return p
}

// printer writes lines to w and keeps the first write error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) line(format string, a ...any) {
	if p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, format+"\n", a...)
}

// noIsolationRung is the rung that contains nothing (rung/host), named in
// every delta it makes.
const noIsolationRung = "host"

// Summary writes the human summary of d to w.
func Summary(w io.Writer, d *dryexec.StateDelta, opt Options) error {
	if d == nil {
		return fmt.Errorf("render: nil StateDelta")
	}
	maxDiff := opt.MaxDiffLines
	if maxDiff == 0 {
		maxDiff = DefaultMaxDiffLines
	}
	c := newPalette(opt.Color)
	p := &printer{w: w}

	// Header: who, where, what, how it ended, how long.
	pr := d.Process
	where := "(" + cleanField(d.Rung) + "):"
	if d.Rung == noIsolationRung {
		// Nothing contained the command: said first, not only among the
		// warnings at the end.
		where = "(" + cleanField(d.Rung) + ", " + c.red.Sprint("no isolation") + "):"
	}
	p.line("%s %s %s %s",
		c.bold.Sprint("trial "+cleanField(d.TrialID)),
		where,
		"$ "+shellJoin(d.Action.Argv),
		"→ "+exitStatus(pr, c)+" "+durationPreposition(pr)+" "+humanDuration(time.Duration(pr.DurationNS)))

	// Process output.
	if !opt.OutputShown {
		writeStream(p, "stdout", pr.Stdout, pr.StdoutTruncated)
		writeStream(p, "stderr", pr.Stderr, pr.StderrTruncated)
	}

	if err := writeFiles(p, d, opt, maxDiff, c); err != nil {
		return err
	}
	// Paths whose mtime alone moved are not changes (Totals leave them
	// out), but commit sets their mtimes: say how many.
	if n := len(d.Touched); n > 0 {
		p.line("%d touched (mtime only)", n)
	}

	// Violations.
	if len(d.Violations) > 0 {
		p.line("%s", c.red.Sprint(fmt.Sprintf("violations (%d):", len(d.Violations))))
		for _, v := range d.Violations {
			p.line("  %s", violationText(v))
		}
	}

	// Warnings: how the containment fell short (not the command's doing).
	for _, w := range d.Warnings {
		p.line("%s %s", c.red.Sprint("warning:"), cleanField(w))
	}

	// Network.
	if len(d.Network) > 0 {
		p.line("network (%d):", len(d.Network))
		for _, n := range d.Network {
			p.line("  %s", networkText(n, c))
		}
	}

	// Decision.
	if d.Decision.Choice != "" {
		p.line("decision: %s (risk %s)", choiceColor(d.Decision.Choice, c),
			strconv.FormatFloat(d.Decision.RiskScore, 'f', 2, 64))
		for _, r := range d.Decision.Reasons {
			p.line("  - %s", cleanField(r))
		}
	}

	if opt.NoCommands {
		return p.err
	}
	id := shellQuote(d.TrialID)
	if d.Decision.Choice == "block" {
		// The policy forbids committing it: offering the command would
		// invite the one step the decision exists to stop.
		p.line("blocked: the policy forbids committing this (see the reasons)   discard: dryexec discard %s", id)
		return p.err
	}
	p.line("commit: dryexec commit %s   discard: dryexec discard %s", id, id)
	return p.err
}

// exitStatus says how the process ended.
func exitStatus(pr dryexec.Process, c palette) string {
	switch {
	case pr.TimedOut:
		return c.red.Sprint("timed out")
	case pr.Signal != "":
		return c.red.Sprint("killed by signal " + cleanField(pr.Signal))
	case pr.ExitCode != 0:
		return c.red.Sprint("exit " + strconv.Itoa(pr.ExitCode))
	default:
		return "exit 0"
	}
}

func durationPreposition(pr dryexec.Process) string {
	if pr.TimedOut || pr.Signal != "" {
		return "after"
	}
	return "in"
}

// humanDuration prints d with about two significant decimals: 850ns, 12.5µs,
// 3.2ms, 1.25s, 2m3s.
func humanDuration(d time.Duration) string {
	f := func(v float64, prec int, unit string) string {
		s := strconv.FormatFloat(v, 'f', prec, 64)
		if strings.Contains(s, ".") {
			s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
		}
		return s + unit
	}
	switch {
	case d < 0:
		return "-" + humanDuration(-d)
	case d < time.Microsecond:
		return strconv.FormatInt(int64(d), 10) + "ns"
	case d < time.Millisecond:
		return f(float64(d)/float64(time.Microsecond), 1, "µs")
	case d < time.Second:
		return f(float64(d)/float64(time.Millisecond), 1, "ms")
	case d < time.Minute:
		return f(d.Seconds(), 2, "s")
	default:
		return d.Round(time.Second).String()
	}
}

// writeStream prints one of the process's output streams under a label.
func writeStream(p *printer, name, text string, truncated bool) {
	if text == "" {
		return
	}
	label := name + ":"
	if truncated {
		label = name + " (truncated, tail kept):"
	}
	p.line("%s", label)
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		p.line("  %s", cleanLine(l))
	}
}

// writeFiles prints the headline of the changes and then either every change
// (with its diff) or, past opt.MaxFileLines changes, the changes grouped by
// directory. Counts are made from the changes themselves so that the line
// always agrees with the list (a delta's totals are not trusted), in one
// pass and bounded memory (fileSummary).
func writeFiles(p *printer, d *dryexec.StateDelta, opt Options, maxDiff int, c palette) error {
	max := opt.MaxFileLines
	if max == 0 {
		max = DefaultMaxFileLines
	}
	max = maxInt(max, 2)
	all := opt.MaxFileLines < 0 || d.NumFiles() <= max
	s := newFileSummary(d.Action.Cwd, max)
	if all {
		if err := d.EachFile(func(f *dryexec.FileChange) error { s.total.add(f); return nil }); err != nil {
			return err
		}
	} else if err := d.EachFile(func(f *dryexec.FileChange) error { s.add(f); return nil }); err != nil {
		return err
	}
	t := s.total
	p.line("%s changed (%s created, %s modified, %s deleted, %s written)",
		plural64(int64(t.n()), "file", "files"), thousands(int64(t.created)), thousands(int64(t.modified)),
		thousands(int64(t.deleted)), bytesText(t.bytes))
	if all {
		return d.EachFile(func(f *dryexec.FileChange) error {
			p.line("  %s %s", opSymbol(f.Op, c), fileDescription(*f))
			if f.Diff != "" {
				writeDiff(p, f.Diff, maxDiff, c)
			}
			return nil
		})
	}
	groups, rest := s.pick()
	if len(groups) > 0 && !strings.HasPrefix(groups[0].key, "/") {
		p.line("  in %s:", cleanField(s.cwd))
	}
	for _, g := range groups {
		p.line("  %s", groupLine(g, c))
	}
	id := shellQuote(d.TrialID)
	if rest.n() > 0 {
		p.line("  %s", c.yellow.Sprint("… "+thousands(int64(rest.n()))+" more "+pluralWord(rest.n(), "change", "changes")+" — dryexec show "+id+" --files"))
	} else {
		p.line("  %s", c.yellow.Sprint("… every change, with diffs: dryexec show "+id+" --files"))
	}
	return p.err
}

// bytesText is a number of bytes as the headline words it: exact below a
// KiB ("13 bytes"), else for people ("22.8 MiB").
func bytesText(n int64) string {
	if n < 1024 {
		return plural64(n, "byte", "bytes")
	}
	return humanBytes(n)
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func plural(n int, one, many string) string { return plural64(int64(n), one, many) }

func plural64(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return thousands(n) + " " + many
}

// opSymbol is git --name-status's letter, as a symbol.
func opSymbol(op dryexec.Op, c palette) string {
	switch op {
	case dryexec.OpCreate, dryexec.OpMkdir, dryexec.OpSymlink:
		return c.green.Sprint("+")
	case dryexec.OpModify:
		return c.yellow.Sprint("~")
	case dryexec.OpDelete, dryexec.OpRmdir:
		return c.red.Sprint("-")
	case dryexec.OpChmod:
		return c.cyan.Sprint("m")
	default:
		return "?"
	}
}

// fileDescription is the path (dirs with a trailing slash, symlinks with their
// target) and, for mode changes, the old and new mode, for owner changes the
// old and new uid:gid.
func fileDescription(f dryexec.FileChange) string {
	var b strings.Builder
	b.WriteString(cleanField(f.Path))
	isDir := f.Kind == dryexec.KindDir || f.Op == dryexec.OpMkdir || f.Op == dryexec.OpRmdir
	if isDir && !strings.HasSuffix(f.Path, "/") {
		b.WriteByte('/')
	}
	if f.LinkTarget != "" && (f.Kind == dryexec.KindSymlink || f.Op == dryexec.OpSymlink) {
		b.WriteString(" -> ")
		b.WriteString(cleanField(f.LinkTarget))
	}
	switch {
	case f.Op == dryexec.OpChmod && f.BeforeMode == f.Mode && f.OwnerChanged():
		// A chown alone: the owner below says it all.
	case f.Op == dryexec.OpChmod && f.BeforeMode != "":
		b.WriteString("  " + cleanField(f.BeforeMode) + " → " + cleanField(f.Mode))
	case f.Op == dryexec.OpChmod:
		b.WriteString("  → " + cleanField(f.Mode))
	case f.Op == dryexec.OpModify && f.BeforeMode != "" && f.Mode != "" && f.BeforeMode != f.Mode:
		b.WriteString("  " + cleanField(f.BeforeMode) + " → " + cleanField(f.Mode))
	}
	if f.OwnerChanged() {
		fmt.Fprintf(&b, "  owner %d:%d → %d:%d", *f.BeforeUID, *f.BeforeGID, f.UID, f.GID)
	}
	if f.Op == dryexec.OpModify && f.Kind == dryexec.KindOther {
		b.WriteString("  (special file)")
	}
	return b.String()
}

// writeDiff prints a unified diff indented under its file line, at most max lines
// (max < 0: all of them).
func writeDiff(p *printer, diff string, max int, c palette) {
	lines := strings.Split(strings.TrimSuffix(diff, "\n"), "\n")
	inHunk := false
	for i, l := range lines {
		if max >= 0 && i == max {
			rest := len(lines) - max
			p.line("    %s", c.yellow.Sprint(fmt.Sprintf("… diff cut after %d lines (%s)",
				max, plural(rest, "more line", "more lines"))))
			return
		}
		s := cleanLine(l)
		switch {
		case strings.HasPrefix(l, "@@"):
			inHunk = true
			s = c.cyan.Sprint(s)
		case !inHunk && (strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "+++ ") ||
			strings.HasPrefix(l, "diff ") || strings.HasPrefix(l, "index ")):
			s = c.bold.Sprint(s)
		case strings.HasPrefix(l, "+"):
			s = c.green.Sprint(s)
		case strings.HasPrefix(l, "-"):
			s = c.red.Sprint(s)
		}
		p.line("    %s", s)
	}
}

func violationText(v dryexec.Violation) string {
	var b strings.Builder
	if v.Kind != "" {
		b.WriteString(cleanField(v.Kind) + ": ")
	}
	b.WriteString(cleanField(v.Detail))
	var who []string
	if v.PID != 0 {
		who = append(who, "pid "+strconv.Itoa(v.PID))
	}
	if v.Exe != "" {
		who = append(who, cleanField(v.Exe))
	}
	if len(who) > 0 {
		b.WriteString(" (" + strings.Join(who, ", ") + ")")
	}
	return b.String()
}

func networkText(n dryexec.NetworkEvent, c palette) string {
	action := cleanField(n.Action)
	padded := fmt.Sprintf("%-7s", action)
	switch n.Action {
	case "blocked":
		padded = c.red.Sprint(padded)
	case "allowed":
		padded = c.yellow.Sprint(padded)
	}
	parts := []string{padded}
	if n.Proto != "" {
		parts = append(parts, cleanField(n.Proto))
	}
	if n.Method != "" {
		parts = append(parts, cleanField(n.Method))
	}
	switch {
	case n.URL != "":
		parts = append(parts, cleanField(n.URL))
	case n.Host != "" && n.Port != 0:
		parts = append(parts, cleanField(net.JoinHostPort(n.Host, strconv.Itoa(n.Port))))
	case n.Host != "":
		parts = append(parts, cleanField(n.Host))
	}
	if n.Status != 0 {
		parts = append(parts, "→ "+strconv.Itoa(n.Status))
	}
	if n.SchemaBreach {
		parts = append(parts, c.red.Sprint("[schema breach]"))
	}
	if n.Reason != "" {
		parts = append(parts, "("+cleanField(n.Reason)+")")
	}
	return strings.Join(parts, " ")
}

func choiceColor(choice string, c palette) string {
	s := cleanField(choice)
	switch choice {
	case "auto_commit":
		return c.green.Sprint(s)
	case "review":
		return c.yellow.Sprint(s)
	case "block":
		return c.red.Sprint(s)
	}
	return s
}

// CommandLine quotes argv for a POSIX shell (so that what is shown can be
// pasted) with control characters escaped.
func CommandLine(argv []string) string { return shellJoin(argv) }

// shellJoin quotes argv for a POSIX shell, so that what is shown can be pasted.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// shellQuote quotes s for a POSIX shell when it needs it, then escapes control
// characters (which a shell would not need escaped, but a terminal does).
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' ||
			strings.IndexByte("_@%+=:,./-", ch) >= 0) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return cleanField("'" + strings.ReplaceAll(s, "'", `'\''`) + "'")
}
