package seatbelt

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Profile is what one sandbox's Seatbelt profile allows. Every path is
// absolute, clean and (on macOS) already resolved through symlinks: the
// kernel matches the vnode's real path (/private/var/…, not /var/…), so an
// unresolved path in a rule would match nothing.
type Profile struct {
	// Writable are the directories the command may create, change and
	// delete beneath: a trial's clone of the working directory and its
	// private tmp; a session's workspace, baseline and tmp
	// (sessionDirs.profile). Nothing else of the host is writable.
	Writable []string
	// Masked are the credential paths (dryexec.MaskPaths): reading their
	// content, listing them and writing beneath them are denied. Their
	// metadata (that they exist, their mode) stays readable, as the ns
	// rung's view shows their names.
	Masked []string
	// Hidden are dryexec's own state (its home, a daemon's socket): every
	// file operation at or beneath them is denied, metadata included.
	Hidden []string
	// NetProxyPort, when not 0, is the one loopback TCP port the command
	// may connect to: where netsim listens as the sandbox's HTTP proxy, on
	// 127.0.0.1 and ::1 both (SBPL's "localhost" is either). 0 denies every
	// network operation.
	NetProxyPort int
	// Tag, when not empty, is put on every deny rule as (with message
	// Tag): the kernel appends it to its report of each denial, so that a
	// reader of the unified log, where every Seatbelt sandbox's denials
	// land, can tell this sandbox's from another's (denials.go). Letters,
	// digits, '-' and '_' only.
	Tag string
}

// PathError is a path a profile cannot hold: not absolute and clean, or a
// name SBPL's string literals cannot carry faithfully (a control
// character, bytes that are not UTF-8). The trial is refused rather than
// run under a rule that means another path.
type PathError struct {
	Path   string
	Reason string
}

func (e *PathError) Error() string {
	return fmt.Sprintf("seatbelt profile: path %q: %s", e.Path, e.Reason)
}

// mach services a shell and the usual tools reach through libc: user and
// group lookups (getpwuid, for ~ and id) and notifications (the time zone).
// Everything else on the bootstrap port is denied: no launchd job, no
// pasteboard, no keychain (securityd), no window server.
var machServices = []string{
	"com.apple.system.opendirectoryd.libinfo",
	"com.apple.system.notification_center",
}

// SBPL returns the profile's text for `sandbox-exec -p`. Rules that deny
// come after those that allow: in SBPL the last rule that matches an
// operation decides it.
func (p Profile) SBPL() (string, error) {
	if !validTag(p.Tag) {
		return "", fmt.Errorf("seatbelt profile: tag %q: want letters, digits, '-' and '_' only", p.Tag)
	}
	// deny is a deny rule's head: its operations and the tag.
	deny := func(ops string) string {
		if p.Tag == "" {
			return "(deny " + ops
		}
		return "(deny " + ops + " (with message " + quote(p.Tag) + ")"
	}
	var b strings.Builder
	b.WriteString("(version 1)\n" + deny("default") + ")\n")
	b.WriteString("; processes: run and fork anything; signal and inspect only this sandbox's\n")
	b.WriteString("(allow process-exec)\n(allow process-fork)\n")
	b.WriteString("(allow signal (target same-sandbox))\n(allow process-info* (target same-sandbox))\n")
	b.WriteString("(allow sysctl-read)\n")
	b.WriteString("; mach: only libc's user lookups and notifications\n(allow mach-lookup")
	for _, s := range machServices {
		b.WriteString(" (global-name " + quote(s) + ")")
	}
	b.WriteString(")\n(allow ipc-posix-shm-read-data (ipc-posix-name \"apple.shm.notification_center\"))\n")
	b.WriteString("; reads: the whole host, as the ns rung's view shows it\n(allow file-read*)\n")
	if len(p.Writable) == 0 {
		return "", errors.New("seatbelt profile: no writable directory (the command needs its clone)")
	}
	b.WriteString("; writes: beneath these only (the clone or workspace, the tmp), and the null device\n(allow file-write*")
	if err := subpaths(&b, p.Writable); err != nil {
		return "", err
	}
	b.WriteString(")\n(allow file-write-data (literal \"/dev/null\"))\n")
	if len(p.Masked) > 0 {
		b.WriteString("; secrets: no content, no listing, no writes (after the allows: the last match wins)\n" + deny("file-read-data file-write*"))
		if err := subpaths(&b, p.Masked); err != nil {
			return "", err
		}
		b.WriteString(")\n")
	}
	if len(p.Hidden) > 0 {
		b.WriteString("; dryexec's own state: nothing at all\n" + deny("file-read* file-write*"))
		if err := subpaths(&b, p.Hidden); err != nil {
			return "", err
		}
		b.WriteString(")\n")
	}
	switch {
	case p.NetProxyPort == 0:
		b.WriteString("; network: none\n" + deny("network*") + ")\n")
	case p.NetProxyPort < 0 || p.NetProxyPort > 65535:
		return "", fmt.Errorf("seatbelt profile: network proxy port %d out of range", p.NetProxyPort)
	default:
		// system-socket is socket(2) itself; what a socket may reach is
		// network-outbound's, and a unix socket is no remote ip.
		b.WriteString("; network: netsim's loopback proxy only (127.0.0.1 and ::1, both netsim's)\n" + deny("network*") + ")\n(allow system-socket)\n")
		b.WriteString("(allow network-outbound (remote ip " + quote("localhost:"+strconv.Itoa(p.NetProxyPort)) + "))\n")
	}
	return b.String(), nil
}

// confine runs argv under the profile. sandbox-exec applies it to itself
// and then execs argv in place (same pid), so everything the command
// starts inherits it. With argv nil it is a session's
// SessionStart.CommandPrefix, which the guest puts before each command.
func confine(profile string, argv []string) []string {
	return append([]string{SandboxExec, "-p", profile, "--"}, argv...)
}

// validTag reports whether tag is empty or a name a string literal and the
// log's predicate carry as it is.
func validTag(tag string) bool {
	for _, r := range tag {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// subpaths writes a (subpath "…") filter for each of paths.
func subpaths(b *strings.Builder, paths []string) error {
	for _, p := range paths {
		if err := checkPath(p); err != nil {
			return err
		}
		b.WriteString(" (subpath " + quote(p) + ")")
	}
	return nil
}

// checkPath refuses what a rule cannot mean exactly: a relative or unclean
// path (the kernel compares whole resolved paths, so "/a/../b" would match
// nothing), and names a string literal cannot carry as the same bytes.
func checkPath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return &PathError{Path: p, Reason: "not absolute"}
	case path.Clean(p) != p:
		return &PathError{Path: p, Reason: "not clean (. or .. or a doubled or trailing slash)"}
	case !utf8.ValidString(p):
		// SBPL's strings are read as text; a name that is not UTF-8 has no
		// literal that is known to match its bytes.
		return &PathError{Path: p, Reason: "not valid UTF-8"}
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return &PathError{Path: p, Reason: fmt.Sprintf("control character %U", r)}
		}
	}
	return nil
}

// quote is an SBPL (TinyScheme) string literal of s, which checkPath has
// passed or which is a constant: only the quote and the backslash need an
// escape, and nothing else is given one.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
