package policy

import (
	"context"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/dryexec/dryexec"
)

// Engine is a compiled Policy. It is immutable and safe for concurrent use.
type Engine struct {
	p     Policy
	rules []compiledRule
	// Absolute patterns are compiled once; relative ones (which need the
	// action's cwd) once per delta.
	allowed, denied, sensitive patternSet
	allowedHosts, deniedHosts  []string
	budgets                    Budgets
	weights                    Weights
	scorer                     *scorer
	persist                    *persistSet
}

// patternSet keeps the source patterns and, if none is relative, their
// compiled form.
type patternSet struct {
	field    string
	src      []string
	compiled *globSet // nil when relative patterns need a cwd
}

func newPatternSet(field string, src []string) (patternSet, error) {
	ps := patternSet{field: field, src: src}
	// Syntax is checked now, so that a bad pattern is a policy error rather
	// than a surprise at decision time: by the one compilation a set of
	// absolute patterns needs, else with a stand-in cwd (the set is
	// compiled for each action's own).
	base := "/cwd"
	if !relative(src) {
		base = ""
	}
	c, err := compileGlobs(field, src, base)
	if err != nil {
		return ps, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if base == "" {
		ps.compiled = c
	}
	return ps, nil
}

func (ps patternSet) forCwd(cwd string) (*globSet, error) {
	if ps.compiled != nil {
		return ps.compiled, nil
	}
	return compileGlobs(ps.field, ps.src, cwd)
}

// Compile checks p and returns its engine. Errors wrap ErrInvalid.
func Compile(p Policy) (*Engine, error) {
	e := &Engine{p: p}
	var err error
	if e.allowed, err = newPatternSet("allowed_mutation_targets", p.AllowedMutationTargets); err != nil {
		return nil, err
	}
	if e.denied, err = newPatternSet("denied_mutation_targets", p.DeniedMutationTargets); err != nil {
		return nil, err
	}
	if e.sensitive, err = newPatternSet("sensitive_paths", p.SensitivePaths); err != nil {
		return nil, err
	}
	for _, h := range append(append([]string{}, p.Network.AllowedHosts...), p.Network.DeniedHosts...) {
		if _, err := path.Match(strings.ToLower(h), ""); err != nil || h == "" {
			return nil, fmt.Errorf("%w: network host pattern %q is not a valid glob", ErrInvalid, h)
		}
	}
	e.allowedHosts, e.deniedHosts = lower(p.Network.AllowedHosts), lower(p.Network.DeniedHosts)
	if err := checkUnit("thresholds.review_above", p.Thresholds.ReviewAbove); err != nil {
		return nil, err
	}
	if p.Thresholds.BlockAbove != nil {
		if err := checkUnit("thresholds.block_above", *p.Thresholds.BlockAbove); err != nil {
			return nil, err
		}
	}
	for name, v := range map[string]int64{"limits.max_files_changed": deref(p.Limits.MaxFilesChanged),
		"limits.max_files_deleted": deref(p.Limits.MaxFilesDeleted), "limits.max_bytes_written": int64(derefSize(p.Limits.MaxBytesWritten)),
		"network.max_requests": deref(p.Network.MaxRequests), "budgets.bytes_written": int64(p.Budgets.BytesWritten),
		"budgets.network_requests": p.Budgets.NetworkRequests, "budgets.files_deleted": p.Budgets.FilesDeleted} {
		if v < 0 {
			return nil, fmt.Errorf("%w: %s is negative", ErrInvalid, name)
		}
	}
	// A zero budget means the default one (a budget of nothing cannot scale).
	e.budgets, e.weights = p.Budgets, p.Weights
	db := DefaultBudgets()
	if e.budgets.BytesWritten == 0 {
		e.budgets.BytesWritten = db.BytesWritten
	}
	if e.budgets.NetworkRequests == 0 {
		e.budgets.NetworkRequests = db.NetworkRequests
	}
	if e.budgets.FilesDeleted == 0 {
		e.budgets.FilesDeleted = db.FilesDeleted
	}
	w := e.weights
	for _, f := range []struct {
		n string
		v float64
	}{{"bytes", w.Bytes}, {"network", w.Network}, {"deletes", w.Deletes}, {"sensitive", w.Sensitive}, {"violations", w.Violations}, {"failure", w.Failure}, {"secrets", w.Secrets}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return nil, fmt.Errorf("%w: weights.%s must be a number ≥ 0", ErrInvalid, f.n)
		}
	}
	if w == (Weights{}) {
		e.weights = DefaultWeights()
	}
	if e.persist, err = compilePersistence(p.Persistence); err != nil {
		return nil, err
	}
	if e.rules, err = compileRules(p.Rules); err != nil {
		return nil, err
	}
	if p.Scorer != nil {
		if e.scorer, err = newScorer(*p.Scorer); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func lower(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToLower(s)
	}
	return out
}

func checkUnit(name string, v float64) error {
	if v < 0 || v > 1 || math.IsNaN(v) {
		return fmt.Errorf("%w: %s must be in [0,1], not %v", ErrInvalid, name, v)
	}
	return nil
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func derefSize(p *ByteSize) ByteSize {
	if p == nil {
		return 0
	}
	return *p
}

// Policy returns the policy e was compiled from.
func (e *Engine) Policy() Policy { return e.p }

// Effect is what a Fact does to the choice.
type Effect string

// Effects, in the order reasons are listed.
const (
	EffectBlock  Effect = "block"
	EffectReview Effect = "review"
	EffectAllow  Effect = "allow"  // an allow rule fired
	EffectRisk   Effect = "risk"   // a factor of the score
	EffectScorer Effect = "scorer" // what the external scorer did
	EffectInfo   Effect = "info"   // context, changes nothing (e.g. a waived threshold)
)

// Fact is one thing that contributed to a decision.
type Fact struct {
	Effect Effect
	// Text is the reason without its effect prefix.
	Text string
}

// Reason is the fact as it appears in Decision.Reasons: "effect: text".
func (f Fact) Reason() string { return string(f.Effect) + ": " + f.Text }

// Result is a decision with the facts behind it.
type Result struct {
	Decision dryexec.Decision
	// Deterministic is the engine's own score; External the scorer's, when it
	// was consulted and answered.
	Deterministic float64
	External      *float64
	Facts         []Fact
}

// Apply decides d and stores the decision in it.
func (e *Engine) Apply(ctx context.Context, d *dryexec.StateDelta) Result {
	r := e.Decide(ctx, d)
	d.Decision = r.Decision
	return r
}

// Decide judges d. It does not modify d. It never fails: what cannot be
// checked (a rule that errors, a scorer that times out) becomes a reason, and
// fails closed where it could have blocked or sent to review.
func (e *Engine) Decide(ctx context.Context, d *dryexec.StateDelta) Result {
	// Limits and the score count the files themselves, not the delta's totals,
	// which a delta from elsewhere could misstate; rules see the same counts.
	c := *d
	c.ComputeTotals()
	var facts facts
	if c.Incomplete {
		// What the delta lacks cannot be judged: the guest supervisor died or
		// broke the protocol, or the walk ran out of time (docs/decision.md).
		facts.add(EffectBlock, "the delta is incomplete: %s", c.IncompleteReason)
	}
	sensitive := e.checkFiles(&c, &facts)
	e.checkPersistence(&c, &facts)
	e.checkLimits(&c, &facts)
	e.checkViolations(&c, &facts)
	e.checkNetwork(&c, &facts)
	failed := e.checkProcess(&c, &facts)
	e.checkContent(&c, &facts)
	if c.Spilled() && len(e.rules) > 0 {
		// Rules are CEL over the delta's fields: they see every change only
		// in Files. A policy with rules holds the whole list in memory
		// (docs/limits.md); c is a copy, d keeps its source.
		if err := c.LoadFiles(); err != nil {
			facts.add(EffectBlock, "the delta's file changes could not be read back for the rules: %v", err)
		}
	}
	allowedBy := e.checkRules(ctx, &c, &facts)
	score := e.score(&c, sensitive, failed, &facts)

	r := Result{Deterministic: score}
	final := score
	switch {
	case facts.has(EffectBlock):
		if e.scorer != nil {
			facts.add(EffectScorer, "not consulted: the action is already blocked")
		}
	case e.scorer != nil:
		ext, err := e.scorer.consult(ctx, &c)
		if err != nil {
			facts.add(EffectScorer, "failed (%v); the deterministic decision stands", err)
		} else {
			r.External = &ext
			wd, we := e.scorer.weights()
			final = round4((wd*score + we*ext) / (wd + we))
			facts.add(EffectScorer, "external score %s, blended %s×%s + %s×%s = %s",
				fmtScore(ext), fmtW(wd/(wd+we)), fmtScore(score), fmtW(we/(wd+we)), fmtScore(ext), fmtScore(final))
		}
	}
	th := e.p.Thresholds
	if !facts.has(EffectBlock) && th.BlockAbove != nil && final > *th.BlockAbove {
		facts.add(EffectBlock, "risk %s is above the block threshold %s", fmtScore(final), fmtScore(*th.BlockAbove))
	}
	if final > th.ReviewAbove && !facts.has(EffectBlock) {
		if allowedBy != "" {
			facts.add(EffectInfo, "risk %s is above the review threshold %s, waived by rule %s", fmtScore(final), fmtScore(th.ReviewAbove), allowedBy)
		} else {
			facts.add(EffectReview, "risk %s is above the review threshold %s", fmtScore(final), fmtScore(th.ReviewAbove))
		}
	}
	choice := AutoCommit
	switch {
	case facts.has(EffectBlock):
		choice = Block
	case facts.has(EffectReview):
		choice = Review
	default:
		facts.add(EffectInfo, "nothing needs a person: no target, limit, network or rule objection, the command succeeded, risk %s is at most %s",
			fmtScore(final), fmtScore(th.ReviewAbove))
	}
	r.Facts = facts.sorted()
	reasons := make([]string, len(r.Facts))
	for i, f := range r.Facts {
		reasons[i] = f.Reason()
	}
	r.Decision = dryexec.Decision{Choice: choice, RiskScore: final, Reasons: reasons}
	return r
}

type facts []Fact

func (fs *facts) add(e Effect, format string, args ...any) {
	*fs = append(*fs, Fact{Effect: e, Text: fmt.Sprintf(format, args...)})
}

func (fs facts) has(e Effect) bool {
	for _, f := range fs {
		if f.Effect == e {
			return true
		}
	}
	return false
}

var effectOrder = []Effect{EffectBlock, EffectReview, EffectAllow, EffectRisk, EffectScorer, EffectInfo}

func (fs facts) sorted() []Fact {
	out := make([]Fact, 0, len(fs))
	for _, e := range effectOrder {
		for _, f := range fs {
			if f.Effect == e {
				out = append(out, f)
			}
		}
	}
	return out
}

// examples collects paths for one kind of fact and words them as "a, b, c and
// N more", so that 10,000 offending files make one readable reason.
type examples struct {
	n     int
	shown []string
}

const maxExamples = 3

func (x *examples) add(s string) {
	x.n++
	if len(x.shown) < maxExamples {
		x.shown = append(x.shown, s)
	}
}

func (x *examples) String() string {
	s := strings.Join(x.shown, ", ")
	if more := x.n - len(x.shown); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// checkFiles checks every changed path against the targets and returns the
// sensitive paths changed, worded for a reason ("" when none).
func (e *Engine) checkFiles(d *dryexec.StateDelta, fs *facts) (sensitive string) {
	allowed, err1 := e.allowed.forCwd(d.Action.Cwd)
	denied, err2 := e.denied.forCwd(d.Action.Cwd)
	sens, err3 := e.sensitive.forCwd(d.Action.Cwd)
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			fs.add(EffectBlock, "the policy cannot be applied: %v", err)
			return ""
		}
	}
	cwd, rw := d.Action.Cwd, e.p.ReviewWhen
	var bad, outside, deny, touched, away, setid, deleted, chown, noCreate examples
	segs := make([]string, 0, 16)
	readErr := d.EachFile(func(f *dryexec.FileChange) error {
		p := f.Path
		if !cleanAbs(p) {
			bad.add(strconv.Quote(p))
			return nil
		}
		segs = splitPath(p, segs[:0])
		if !allowed.all && allowed.first(p, segs) == nil {
			outside.add(p)
		}
		if rw.OutsideCwd && !beneath(p, cwd) {
			away.add(p)
		}
		if rw.Deletes && (f.Op == dryexec.OpDelete || f.Op == dryexec.OpRmdir) {
			deleted.add(p)
		}
		if rw.SetID && f.Op != dryexec.OpDelete && f.Op != dryexec.OpRmdir && setID(f.Mode) {
			setid.add(p + " (" + f.Mode + ")")
		}
		if ownerReview(f, cwd) {
			chown.add(fmt.Sprintf("%s (%d:%d → %d:%d)", p, *f.BeforeUID, *f.BeforeGID, f.UID, f.GID))
		}
		if f.Kind == dryexec.KindOther && (f.Op == dryexec.OpCreate || f.Op == dryexec.OpModify) {
			noCreate.add(p)
		}
		if g := denied.first(p, segs); g != nil {
			deny.add(p + " (" + g.src + ")")
		}
		if g := sens.first(p, segs); g != nil {
			touched.add(p + " (" + g.src + ")")
		}
		return nil
	})
	if readErr != nil {
		fs.add(EffectBlock, "the delta's file changes could not be read back: %v", readErr)
	}
	// A touched path is not a change of the contract, but commit sets its
	// mtime on the host: a write there all the same, so the targets apply
	// (a `touch /etc/x` auto-committed set /etc/x's mtime). The other checks
	// leave it alone: a busy dir outside the cwd (/tmp) is touched by any
	// temp file that came and went.
	for _, t := range d.Touched {
		p := t.Path
		if !cleanAbs(p) {
			bad.add(strconv.Quote(p))
			continue
		}
		segs = splitPath(p, segs[:0])
		// A directory's mtime moves whenever an entry is made or removed
		// in it: creating build/ in the cwd touches the cwd, which is no
		// write outside an allowed build/**. Denied targets still see it.
		if !allowed.all && t.Kind != dryexec.KindDir && allowed.first(p, segs) == nil {
			outside.add(p + " (mtime only)")
		}
		if g := denied.first(p, segs); g != nil {
			deny.add(p + " (" + g.src + ", mtime only)")
		}
	}
	if bad.n > 0 {
		fs.add(EffectBlock, "paths that are not absolute and clean: %s", bad.String())
	}
	if outside.n > 0 {
		if len(allowed.gs) == 0 {
			fs.add(EffectBlock, "the policy allows no file changes (allowed_mutation_targets is empty), and it changes %s", outside.String())
		} else {
			fs.add(EffectBlock, "changes outside the allowed targets (%s): %s", strings.Join(allowed.sources(), ", "), outside.String())
		}
	}
	if deny.n > 0 {
		fs.add(EffectBlock, "touches a denied target: %s", deny.String())
	}
	if away.n > 0 {
		fs.add(EffectReview, "changes outside the working directory %s: %s", cwd, away.String())
	}
	if deleted.n > 0 {
		fs.add(EffectReview, "deletes what exists on the host: %s", deleted.String())
	}
	if setid.n > 0 {
		fs.add(EffectReview, "sets a setuid or setgid bit: %s", setid.String())
	}
	if chown.n > 0 {
		fs.add(EffectReview, "changes the owner of %s", chown.String())
	}
	if noCreate.n > 0 {
		// Commit refuses these by name: auto_commit would only fail.
		fs.add(EffectReview, "commit cannot create a unix socket or device node: %s", noCreate.String())
	}
	if touched.n == 0 {
		return ""
	}
	return touched.String()
}

// ownerReview reports whether f's owner change needs a person: one that gives
// the path to another user (root included), makes root its group, or is of a
// path outside the working directory. A change of group, to another than
// root's, of a path in the cwd that stays its user's (chgrp in the project)
// does not. Not a ReviewWhen switch: a chown outside the project is never
// routine.
func ownerReview(f *dryexec.FileChange, cwd string) bool {
	if !f.OwnerChanged() {
		return false
	}
	return f.UID != *f.BeforeUID || f.GID == 0 || !beneath(f.Path, cwd)
}

// beneath reports whether the clean path p is dir or inside it. A relative or
// empty dir contains nothing, so that a delta without a cwd fails closed.
func beneath(p, dir string) bool {
	if dir == "" || dir[0] != '/' {
		return false
	}
	if dir == "/" {
		return true
	}
	return p == dir || (len(p) > len(dir) && p[len(dir)] == '/' && p[:len(dir)] == dir)
}

// setID reports whether the octal mode string has the setuid or setgid bit.
func setID(mode string) bool {
	m, err := strconv.ParseUint(mode, 8, 32)
	return err == nil && m&0o6000 != 0
}

// cleanAbs reports whether p is absolute and clean (path.Clean(p) == p),
// without allocating: no empty, "." or ".." segment, no trailing slash.
func cleanAbs(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	if p == "/" {
		return true
	}
	start := 1
	for i := 1; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			switch p[start:i] {
			case "", ".", "..":
				return false
			}
			start = i + 1
		}
	}
	return true
}

// splitPath splits the clean absolute path p into its segments, reusing buf.
func splitPath(p string, buf []string) []string {
	if p == "/" {
		return buf
	}
	start := 1
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			buf = append(buf, p[start:i])
			start = i + 1
		}
	}
	return append(buf, p[start:])
}

func (e *Engine) checkLimits(d *dryexec.StateDelta, fs *facts) {
	l, t := e.p.Limits, d.Totals
	if l.MaxBytesWritten != nil && t.BytesWritten > int64(*l.MaxBytesWritten) {
		fs.add(EffectBlock, "limit: writes %s, more than max_bytes_written %s", humanBytes(t.BytesWritten), l.MaxBytesWritten)
	}
	if l.MaxFilesChanged != nil && int64(t.FilesChanged) > *l.MaxFilesChanged {
		fs.add(EffectBlock, "limit: changes %s, more than max_files_changed %d", count(t.FilesChanged, "path"), *l.MaxFilesChanged)
	}
	if l.MaxFilesDeleted != nil && int64(t.FilesDeleted) > *l.MaxFilesDeleted {
		fs.add(EffectBlock, "limit: deletes %s, more than max_files_deleted %d", count(t.FilesDeleted, "path"), *l.MaxFilesDeleted)
	}
}

func (e *Engine) checkViolations(d *dryexec.StateDelta, fs *facts) {
	byKind := map[string]*examples{}
	var kinds []string
	for _, v := range d.Violations {
		x := byKind[v.Kind]
		if x == nil {
			x = &examples{}
			byKind[v.Kind] = x
			kinds = append(kinds, v.Kind)
		}
		s := v.Detail
		if v.Exe != "" {
			s += " (" + v.Exe + ")"
		}
		x.add(s)
	}
	for _, k := range kinds {
		if k == dryexec.ViolationSecret && slices.Contains(e.p.Violations.ReviewKinds, k) {
			// Contained: the mask showed the command an empty path, so what
			// it read was nothing. A person may want to know which tool
			// looks at credentials; nothing needs stopping.
			fs.add(EffectReview, "read masked credential paths (contained: the command saw them empty; review_kinds): %s", byKind[k].String())
			continue
		}
		if slices.Contains(e.p.Violations.ReviewKinds, k) {
			fs.add(EffectReview, "the boundary refused something (%s violation, review_kinds): %s", k, byKind[k].String())
			continue
		}
		fs.add(EffectBlock, "the boundary refused something (%s violation): %s", k, byKind[k].String())
	}
}

func (e *Engine) checkNetwork(d *dryexec.StateDelta, fs *facts) {
	n := e.p.Network
	if n.MaxRequests != nil && int64(len(d.Network)) > *n.MaxRequests {
		fs.add(EffectBlock, "limit: %s, more than network.max_requests %d", count(len(d.Network), "network request"), *n.MaxRequests)
	}
	var denied, unlisted, breach, egress examples
	for i := range d.Network {
		ev := &d.Network[i]
		host := strings.ToLower(ev.Host)
		what := requestText(ev)
		if matchHost(e.deniedHosts, host) {
			denied.add(what)
		}
		if len(e.allowedHosts) > 0 && !matchHost(e.allowedHosts, host) {
			unlisted.add(what)
		}
		if ev.SchemaBreach {
			breach.add(what)
		}
		if ev.Action == "allowed" {
			egress.add(what)
		}
	}
	if denied.n > 0 {
		fs.add(EffectBlock, "talks to a denied host: %s", denied.String())
	}
	if unlisted.n > 0 {
		fs.add(EffectBlock, "talks to a host outside network.allowed_hosts (%s): %s", strings.Join(n.AllowedHosts, ", "), unlisted.String())
	}
	if breach.n > 0 {
		fs.add(EffectReview, "requests that break the mocked API's schema: %s", breach.String())
	}
	if egress.n > 0 && n.ReviewEgress {
		fs.add(EffectReview, "requests forwarded to the real network: %s", egress.String())
	}
}

func requestText(ev *dryexec.NetworkEvent) string {
	s := ev.Proto
	if ev.Method != "" {
		s += " " + ev.Method
	}
	switch {
	case ev.URL != "":
		s += " " + ev.URL
	case ev.Host != "":
		s += " " + ev.Host
		if ev.Port != 0 {
			s += ":" + strconv.Itoa(ev.Port)
		}
	}
	if ev.Action != "" {
		s += " (" + ev.Action + ")"
	}
	return strings.TrimSpace(s)
}

func matchHost(patterns []string, host string) bool {
	for _, p := range patterns {
		if p == "*" || p == host {
			return true
		}
		if ok, _ := path.Match(p, host); ok {
			return true
		}
	}
	return false
}

// checkProcess reports whether the command failed (and says how).
func (e *Engine) checkProcess(d *dryexec.StateDelta, fs *facts) bool {
	pr := d.Process
	switch {
	case pr.TimedOut:
		fs.add(EffectReview, "the command failed: it timed out and was killed")
	case pr.Signal != "":
		fs.add(EffectReview, "the command failed: killed by signal %s", pr.Signal)
	case pr.ExitCode != 0:
		fs.add(EffectReview, "the command failed: exit code %d", pr.ExitCode)
	default:
		return false
	}
	return true
}

// score computes the deterministic risk score (docs/decision.md):
//
//	score = min(1, Σ weight_f · x_f), each x_f in [0,1]:
//	x_bytes      = min(1, bytes_written / budgets.bytes_written)
//	x_network    = min(1, requests / budgets.network_requests)
//	x_deletes    = min(1, files_deleted / budgets.files_deleted)
//	x_sensitive  = 1 if a changed path matches sensitive_paths, else 0
//	x_violations = 1 if the delta has a violation other than "secret", else 0
//	x_secrets    = 1 if the delta has a "secret" violation (a contained read of a masked path), else 0
//	x_failure    = 1 if the command failed (exit ≠ 0, signal, timeout), else 0
//
// rounded to 4 decimals. Each non-zero term is a reason.
func (e *Engine) score(d *dryexec.StateDelta, sensitive string, failed bool, fs *facts) float64 {
	w, b, t := e.weights, e.budgets, d.Totals
	sum := 0.0
	term := func(weight, x float64, format string, args ...any) {
		if x <= 0 || weight == 0 {
			return
		}
		x = math.Min(1, x)
		sum += weight * x
		if round4(weight*x) == 0 {
			return // below the score's precision: not worth a line
		}
		fs.add(EffectRisk, "+%s "+format, append([]any{fmtW(weight * x)}, args...)...)
	}
	term(w.Bytes, float64(t.BytesWritten)/float64(b.BytesWritten), "writes %s (budget %s)", humanBytes(t.BytesWritten), b.BytesWritten)
	term(w.Network, float64(len(d.Network))/float64(b.NetworkRequests), "%s (budget %d)", count(len(d.Network), "network request"), b.NetworkRequests)
	term(w.Deletes, float64(t.FilesDeleted)/float64(b.FilesDeleted), "deletes %s (budget %d)", count(t.FilesDeleted, "path"), b.FilesDeleted)
	if sensitive != "" {
		term(w.Sensitive, 1, "changes sensitive paths: %s", sensitive)
	}
	secrets := 0
	for _, v := range d.Violations {
		if v.Kind == dryexec.ViolationSecret {
			secrets++
		}
	}
	if n := len(d.Violations) - secrets; n > 0 {
		term(w.Violations, 1, "%s", count(n, "violation"))
	}
	if secrets > 0 {
		term(w.Secrets, 1, "%s (contained)", count(secrets, "read of a masked credential path"))
	}
	if failed {
		term(w.Failure, 1, "the command failed")
	}
	return round4(math.Min(1, sum))
}

// count words n things: "1 path", "3 paths".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

func round4(f float64) float64 { return math.Round(f*10000) / 10000 }

func fmtScore(f float64) string { return fmtW(f) }

// fmtW formats a weight or a contribution with up to 4 decimals, at least 2.
func fmtW(f float64) string {
	s := strconv.FormatFloat(round4(f), 'f', 4, 64)
	s = strings.TrimRight(s, "0")
	if i := strings.IndexByte(s, '.'); i >= 0 && len(s)-i < 3 {
		s += strings.Repeat("0", 3-(len(s)-i))
	}
	return s
}
