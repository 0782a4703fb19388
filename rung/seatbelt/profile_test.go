package seatbelt

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// sexp is one form of a profile as an SBPL reader sees it: an atom, a
// string (decoded) or a list.
type sexp struct {
	atom string
	str  *string
	list []sexp
}

// readSBPL reads text the way TinyScheme, SBPL's reader, does for what a
// profile holds: lists, symbols, ; comments and strings with \" \\ \n \t
// \r and \xHH escapes. A profile that does not read back into the forms it
// was built from (an unbalanced quote or paren a path smuggled in) fails
// here.
func readSBPL(t *testing.T, text string) []sexp {
	t.Helper()
	i := 0
	var read func() (sexp, bool)
	skip := func() {
		for i < len(text) {
			switch c := text[i]; {
			case c == ';':
				for i < len(text) && text[i] != '\n' {
					i++
				}
			case c == ' ' || c == '\n' || c == '\t' || c == '\r':
				i++
			default:
				return
			}
		}
	}
	read = func() (sexp, bool) {
		skip()
		if i >= len(text) {
			return sexp{}, false
		}
		switch text[i] {
		case '(':
			i++
			var l []sexp
			for {
				skip()
				if i >= len(text) {
					t.Fatalf("unbalanced ( in profile:\n%s", text)
				}
				if text[i] == ')' {
					i++
					return sexp{list: l}, true
				}
				e, _ := read()
				l = append(l, e)
			}
		case ')':
			t.Fatalf("unbalanced ) at %d in profile:\n%s", i, text)
		case '"':
			i++
			var b strings.Builder
			for {
				if i >= len(text) {
					t.Fatalf("unterminated string in profile:\n%s", text)
				}
				c := text[i]
				i++
				if c == '"' {
					s := b.String()
					return sexp{str: &s}, true
				}
				if c != '\\' {
					b.WriteByte(c)
					continue
				}
				e := text[i]
				i++
				switch e {
				case 'n':
					b.WriteByte('\n')
				case 't':
					b.WriteByte('\t')
				case 'r':
					b.WriteByte('\r')
				case 'x':
					var v byte
					fmt.Sscanf(text[i:i+2], "%02x", &v)
					b.WriteByte(v)
					i += 2
				default:
					b.WriteByte(e)
				}
			}
		}
		j := i
		for i < len(text) && !strings.ContainsRune(" \n\t\r()\";", rune(text[i])) {
			i++
		}
		return sexp{atom: text[j:i]}, true
	}
	var out []sexp
	for {
		e, ok := read()
		if !ok {
			return out
		}
		out = append(out, e)
	}
}

// head is a list form's first atoms up to its first filter:
// "allow file-write*", "deny file-read-data file-write*".
func (e sexp) head() string {
	var h []string
	for _, x := range e.list {
		if x.atom == "" {
			break
		}
		h = append(h, x.atom)
	}
	return strings.Join(h, " ")
}

// filters are the (NAME "string") filters of a rule, as NAME → strings.
func (e sexp) filters() map[string][]string {
	out := map[string][]string{}
	for _, x := range e.list {
		if len(x.list) == 2 && x.list[1].str != nil {
			out[x.list[0].atom] = append(out[x.list[0].atom], *x.list[1].str)
		}
	}
	return out
}

// rules reads a profile into its rules, "allow file-write*" → the rule.
func rules(t *testing.T, text string) map[string]sexp {
	t.Helper()
	out := map[string]sexp{}
	for _, f := range readSBPL(t, text) {
		h := f.head()
		if _, dup := out[h]; dup && h != "allow" {
			t.Fatalf("rule %q twice in profile:\n%s", h, text)
		}
		out[h] = f
	}
	return out
}

// TestProfileHostilePaths: whatever bytes a path holds, the profile reads
// back as exactly the rules it was built with, each path decoding to
// itself; a path no literal can carry is refused by name.
func TestProfileHostilePaths(t *testing.T) {
	hostile := []string{
		`/Users/a/plain`,
		`/Users/a/q"uote`,
		`/Users/a/") (allow default) ("`,
		`/Users/a/back\slash\`,
		`/Users/a/\"`,
		`/Users/a/semi;colon (paren`,
		`/Users/a/#|block|# #t`,
		`/Users/a/ü ñ 日本`,
		`/Users/a/\x41`,
	}
	for _, p := range hostile {
		t.Run(p, func(t *testing.T) {
			pr := Profile{Writable: []string{p, "/private/tmp/x"}, Masked: []string{p + "/.ssh"}, Hidden: []string{p + "/.local/state/dryexec"}}
			text, err := pr.SBPL()
			if err != nil {
				t.Fatal(err)
			}
			r := rules(t, text)
			for _, want := range []struct {
				rule string
				path []string
			}{
				{"allow file-write*", pr.Writable},
				{"deny file-read-data file-write*", pr.Masked},
				{"deny file-read* file-write*", pr.Hidden},
			} {
				got := r[want.rule].filters()["subpath"]
				if !slices.Equal(got, want.path) {
					t.Errorf("%s: subpaths %q, want %q\n%s", want.rule, got, want.path, text)
				}
			}
			if _, ok := r["allow default"]; ok {
				t.Fatalf("a path smuggled (allow default) in:\n%s", text)
			}
			if len(r) != 15 {
				t.Errorf("profile has %d rules, want 15:\n%s", len(r), text)
			}
		})
	}
}

// TestProfileRefuses: a path that no SBPL literal carries as the same
// bytes, or that the kernel would never match, is refused with a
// *PathError naming it, wherever it is in the profile.
func TestProfileRefuses(t *testing.T) {
	for _, c := range []struct{ name, path, reason string }{
		{"newline", "/Users/a/new\nline", "control character"},
		{"tab", "/Users/a/a\tb", "control character"},
		{"nul", "/Users/a/a\x00b", "control character"},
		{"del", "/Users/a/a\x7fb", "control character"},
		{"not utf-8", "/Users/a/\xff\xfe", "UTF-8"},
		{"relative", "Users/a", "not absolute"},
		{"dotdot", "/Users/a/../b", "not clean"},
		{"trailing slash", "/Users/a/", "not clean"},
	} {
		for _, where := range []string{"writable", "masked", "hidden"} {
			t.Run(c.name+"/"+where, func(t *testing.T) {
				pr := Profile{Writable: []string{"/private/tmp/w"}}
				switch where {
				case "writable":
					pr.Writable = append(pr.Writable, c.path)
				case "masked":
					pr.Masked = []string{c.path}
				case "hidden":
					pr.Hidden = []string{c.path}
				}
				text, err := pr.SBPL()
				var pe *PathError
				if !errors.As(err, &pe) || pe.Path != c.path || !strings.Contains(pe.Reason, c.reason) {
					t.Fatalf("got %q, %v; want a PathError for %q (%s)", text, err, c.path, c.reason)
				}
			})
		}
	}
}

// TestProfileRules: what the profile allows and denies, rule by rule: deny
// by default, writes only beneath the writable dirs, secrets denied after
// every allow (the last match wins), the network closed or open to one
// loopback port, mach lookups only libc's two services.
func TestProfileRules(t *testing.T) {
	for _, c := range []struct {
		name string
		port int
		net  []string // the network rules, in order
	}{
		{"no network", 0, []string{"deny network*"}},
		{"netsim proxy", 41999, []string{"deny network*", "allow system-socket", "allow network-outbound"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pr := Profile{Writable: []string{"/private/var/folders/x/clone", "/private/var/folders/x/tmp"},
				Masked: []string{"/Users/a/.ssh", "/Users/a/.netrc"}, Hidden: []string{"/Users/a/.local/state/dryexec"}, NetProxyPort: c.port}
			text, err := pr.SBPL()
			if err != nil {
				t.Fatal(err)
			}
			forms := readSBPL(t, text)
			var heads []string
			for _, f := range forms {
				heads = append(heads, f.head())
			}
			if heads[0] != "version 1" || heads[1] != "deny default" {
				t.Fatalf("profile does not start (version 1) (deny default): %q", heads)
			}
			pos := func(h string) int { return slices.Index(heads, h) }
			for _, deny := range []string{"deny file-read-data file-write*", "deny file-read* file-write*"} {
				if pos(deny) < pos("allow file-read*") || pos(deny) < pos("allow file-write*") {
					t.Errorf("%s comes before an allow it must override: %q", deny, heads)
				}
			}
			var netRules []string
			for _, h := range heads {
				if strings.Contains(h, "network") || strings.Contains(h, "socket") {
					netRules = append(netRules, h)
				}
			}
			if !slices.Equal(netRules, c.net) {
				t.Errorf("network rules %q, want %q", netRules, c.net)
			}
			r := rules(t, text)
			if c.port != 0 {
				// Exactly one filter: the proxy's loopback port. No other
				// address, no unix socket (no remote unix-socket, no path).
				out := r["allow network-outbound"]
				if len(out.list) != 3 {
					t.Fatalf("network-outbound allows more than one destination: %+v", out)
				}
				got := out.list[2]
				if len(got.list) != 3 || got.list[0].atom != "remote" || got.list[1].atom != "ip" || *got.list[2].str != "localhost:41999" {
					t.Errorf("network allow is %+v, want (remote ip \"localhost:41999\")", got)
				}
				if sock := r["allow system-socket"]; len(sock.list) != 2 {
					t.Errorf("system-socket has filters: %+v", sock)
				}
				if pos("allow network-outbound") < pos("deny network*") {
					t.Errorf("the proxy's allow comes before deny network* (the last match wins): %q", heads)
				}
			}
			for _, h := range heads {
				if strings.HasPrefix(h, "allow network") && h != "allow network-outbound" {
					t.Errorf("network opened beyond the proxy: %s", h)
				}
			}
			if got := r["allow mach-lookup"].filters()["global-name"]; !slices.Equal(got, machServices) {
				t.Errorf("mach-lookup allows %q, want only %q", got, machServices)
			}
			if got := r["allow file-write*"].filters()["subpath"]; !slices.Equal(got, pr.Writable) {
				t.Errorf("writable %q, want %q", got, pr.Writable)
			}
			for h, f := range r {
				if strings.HasPrefix(h, "allow file-write") && h != "allow file-write*" && h != "allow file-write-data" {
					t.Errorf("an unexpected write rule: %s", h)
				}
				if h == "allow file-write-data" && !slices.Equal(f.filters()["literal"], []string{"/dev/null"}) {
					t.Errorf("file-write-data allowed beyond /dev/null: %+v", f)
				}
			}
		})
	}
	if _, err := (Profile{}).SBPL(); err == nil {
		t.Error("a profile with nothing writable was built")
	}
	if _, err := (Profile{Writable: []string{"/w"}, NetProxyPort: 70000}).SBPL(); err == nil {
		t.Error("a proxy port out of range was accepted")
	}
}

// TestProfileTag: with a tag, every deny rule, the default's included,
// carries (with message TAG), so that each of the profile's denials is
// reported with it, and no allow rule does; a tag the log's predicate or a
// literal could not carry as it is is refused.
func TestProfileTag(t *testing.T) {
	for _, port := range []int{0, 41999} {
		pr := Profile{Writable: []string{"/w"}, Masked: []string{"/Users/a/.ssh"}, Hidden: []string{"/s"}, NetProxyPort: port, Tag: testTag}
		text, err := pr.SBPL()
		if err != nil {
			t.Fatal(err)
		}
		denies := 0
		for _, f := range readSBPL(t, text) {
			var tagged []string
			for _, x := range f.list {
				if len(x.list) == 3 && x.list[0].atom == "with" && x.list[1].atom == "message" && x.list[2].str != nil {
					tagged = append(tagged, *x.list[2].str)
				}
			}
			switch h := f.head(); {
			case strings.HasPrefix(h, "deny "):
				denies++
				if !slices.Equal(tagged, []string{testTag}) {
					t.Errorf("%s: messages %q, want [%s]", h, tagged, testTag)
				}
			case len(tagged) > 0:
				t.Errorf("%s carries the tag", h)
			}
		}
		if denies != 4 {
			t.Errorf("%d deny rules, want 4 (default, secrets, own state, network):\n%s", denies, text)
		}
	}
	for _, bad := range []string{`a"b`, `a)b`, "a\nb", "a b", `a\b`, "é"} {
		if _, err := (Profile{Writable: []string{"/w"}, Tag: bad}).SBPL(); err == nil {
			t.Errorf("tag %q accepted", bad)
		}
	}
}
