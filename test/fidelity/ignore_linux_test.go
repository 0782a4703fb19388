package fidelity

import (
	"regexp"
	"strings"
)

// aspect is what an ignore rule leaves out of the comparison.
type aspect string

const (
	// skipAll: the path and everything beneath it are not compared at all,
	// not even whether they exist (their names are not deterministic).
	skipAll aspect = "everything"
	// skipContent: kind, mode, owner and existence are compared; the bytes are not.
	skipContent aspect = "content"
	// skipMtime: the mtime is not compared.
	skipMtime aspect = "mtime"
	// skipOutput: the part of stdout/stderr the regexp matches is not compared.
	skipOutput aspect = "output"
	// general: a rule of the comparison itself, applied by the code to every
	// workload (no path or regexp).
	general aspect = "rule"
)

// ignoreRule is one thing the harness does not compare, and why. This table is
// the whole list: anything not in it is compared, and docs/fidelity.md repeats
// it (TestDocsListEveryRule keeps the two in step).
type ignoreRule struct {
	workload string // the workload it applies to; "" for every workload
	path     string // a glob over tree-relative paths: * within a name, ** across names
	output   string // or a regexp over the command's (and the check's) stdout and stderr
	aspect   aspect
	what     string // for general rules: what is left out
	why      string
}

// matches reports whether the tree-relative path p falls under r.path.
func (r ignoreRule) matches(p string) bool {
	return globRegexp(r.path).MatchString(p)
}

// globRegexp turns a path glob into an anchored regexp: ** matches anything
// (also /), * and ? stay within one name. A pattern ending in /** also
// matches the directory itself.
func globRegexp(g string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	dirToo := strings.HasSuffix(g, "/**")
	if dirToo {
		g = strings.TrimSuffix(g, "/**")
	}
	for i := 0; i < len(g); i++ {
		switch {
		case strings.HasPrefix(g[i:], "**"):
			b.WriteString(".*")
			i++
		case g[i] == '*':
			b.WriteString("[^/]*")
		case g[i] == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
		}
	}
	if dirToo {
		b.WriteString("(/.*)?")
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// ignored is every nondeterminism the harness leaves out, with the reason.
// Each was found by running the workload natively twice in identical trees
// (DRYEXEC_FIDELITY_CALIBRATE=1) and seeing what differed.
var ignored = []ignoreRule{
	{aspect: general, what: "atime, ctime, inode numbers",
		why: "atime moves with every read (and the scans read); ctime cannot be set by anyone; inode numbers only matter as hard-link groups, which are compared"},
	{aspect: general, what: "the exact mtime of a file written at run time",
		why: "natively it is the wall-clock moment of the write, which no trial can reproduce; instead the committed file's mtime must fall within the trial's run (commit keeps the trial's mtime rather than stamping its own), and a file not written at run time (kept, renamed, extracted by tar, set by touch -d) must keep its exact mtime"},
	{aspect: general, what: "the mtime of a directory whose entries changed at run time",
		why: "it is the moment of its last entry change, natively and in the trial; commit makes and removes entries at its own time. A directory's deterministic mtime (tar, rsync -t, untouched) is compared"},
	{aspect: general, what: "the header of a timestamp .pyc whose source was written at run time",
		why: "it records the source's mtime; instead each .pyc must be valid for its own tree's source (Python would not recompile it) and its code must be equal"},
	{aspect: general, what: "xattrs, ACLs, file capabilities",
		why: "no workload sets them; not part of the delta's contract (v1)"},
	{path: "**/.git/index", aspect: skipContent,
		why: "git's index caches each tracked file's ctime, mtime, device and inode number, which differ in every tree; the check runs git status and git fsck, which must agree"},
	{workload: "npm_install_tarball", path: "home/.npm/_logs/**", aspect: skipAll,
		why: "npm names each debug log after the moment it started (2026-12-04T03_30_22_969Z-debug-0.log) and writes timings into it"},
	{workload: "npm_install_tarball", path: "home/.npm/_cacache/index-v5/**", aspect: skipContent,
		why: "each npm cache index entry records the time it was written (\"time\":…) and is named after its key, not its content"},
	{workload: "npm_install_tarball", output: `added (\d+) packages? in [0-9.]+m?s?`, aspect: skipOutput,
		why: "npm reports how long the install took (in ms, s, or m past a minute: a vm trial under TCG took 11m)"},
	{workload: "go_build", path: "home/.cache/go-build/**", aspect: skipAll,
		why: "which entries the go command adds to its build cache depends on how old the source files are (it does not cache the hash of a file changed in the last few seconds), and action entries record the time they were written; the check runs the built program"},
}

// rulesFor returns the rules that apply to the workload named.
func rulesFor(workload string) []ignoreRule {
	var out []ignoreRule
	for _, r := range ignored {
		if r.workload == "" || r.workload == workload {
			out = append(out, r)
		}
	}
	return out
}

// knownFailure is a workload (in one mode, or both) that differs today, and
// why. The test fails for any other workload that differs, and for an entry
// here whose workload no longer differs (remove it then). The issue this
// harness proves is closed when this table is empty.
type knownFailure struct {
	workload string
	mode     string // "root", "rootless", "gvisor", "vm" or "" for every mode
	cause    string
}

// knownDiffering: on ns every workload is exact, root and rootless. The
// last ns entry, git_clone_local rootless (a new link to a host file showed
// the overlay's copy's st_dev/st_ino, so git's local clone aborted with
// "hardlink different from source"), went when the supervisor's link worker
// began giving the new name the identity the source showed before the link
// (docs/containment.md, "Links the supervisor performs"). On gvisor every
// workload is exact too: the three that make a FIFO differed until the
// trial guest began finding the FIFOs gVisor keeps in its own memory and
// the host making them in the upper dirs (docs/fidelity.md, "On the gvisor
// rung"). On vm the same three differed (QEMU's 9p server cannot make a
// FIFO) until the VM's supervisor began handing the command's mknod and
// chmod of a FIFO to the host, which makes it through the view
// (docs/architecture.md, "The vm rung"); hard_links differed on vm (the
// VM's 9p client kept whole seconds of the times cp -a gives) until the
// VM's supervisor began handing utimensat with a fraction of a second to
// the host as well.
var knownDiffering = []knownFailure{}

// known returns the entry for workload w in mode, if there is one.
func known(w, mode string) (knownFailure, bool) {
	for _, k := range knownDiffering {
		if k.workload == w && (k.mode == "" || k.mode == mode) {
			return k, true
		}
	}
	return knownFailure{}, false
}
