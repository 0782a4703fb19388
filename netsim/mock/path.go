package mock

import (
	"fmt"
	"strings"
)

// Pattern matches a request path. Three forms, chosen by the text:
//
//	/users/42        exact
//	/static/*        prefix (a trailing "*")
//	/users/{id}      template: each {name} matches one non-empty segment
type Pattern struct {
	raw    string
	prefix string   // set for the prefix form
	segs   []string // template segments; "{x}" ones are parameters
	params int
}

func CompilePattern(p string) (Pattern, error) {
	if p == "" {
		return Pattern{raw: "*", prefix: "/"}, nil
	}
	if !strings.HasPrefix(p, "/") {
		return Pattern{}, fmt.Errorf("path %q must start with /", p)
	}
	if strings.HasSuffix(p, "*") {
		pre := strings.TrimSuffix(p, "*")
		if strings.ContainsAny(pre, "*{}") {
			return Pattern{}, fmt.Errorf("path %q: a prefix cannot hold * or {}", p)
		}
		return Pattern{raw: p, prefix: pre}, nil
	}
	pt := Pattern{raw: p, segs: strings.Split(p, "/")}
	for _, s := range pt.segs {
		if strings.Contains(s, "*") {
			return Pattern{}, fmt.Errorf("path %q: * only at the end", p)
		}
		open, close := strings.Count(s, "{"), strings.Count(s, "}")
		switch {
		case open == 0 && close == 0:
		case open == 1 && close == 1 && strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") && len(s) > 2:
			pt.params++
		default:
			return Pattern{}, fmt.Errorf("path %q: a parameter must be a whole segment such as {id}", p)
		}
	}
	return pt, nil
}

// Match reports whether path matches and, for templates, the parameters.
func (p Pattern) Match(path string) (map[string]string, bool) {
	if p.prefix != "" {
		return nil, strings.HasPrefix(path, p.prefix)
	}
	if p.params == 0 {
		return nil, path == p.raw
	}
	got := strings.Split(path, "/")
	if len(got) != len(p.segs) {
		return nil, false
	}
	params := make(map[string]string, p.params)
	for i, s := range p.segs {
		if strings.HasPrefix(s, "{") {
			if got[i] == "" {
				return nil, false
			}
			params[s[1:len(s)-1]] = got[i]
			continue
		}
		if s != got[i] {
			return nil, false
		}
	}
	return params, true
}

// MatchHost reports whether host matches pattern: "" or "*" match every host,
// "*.example.com" matches any name below example.com (not example.com itself),
// anything else matches exactly, ignoring case and a trailing dot.
func MatchHost(pattern, host string) bool {
	pattern = strings.TrimSuffix(strings.ToLower(pattern), ".")
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	switch {
	case pattern == "" || pattern == "*":
		return true
	case strings.HasPrefix(pattern, "*."):
		return strings.HasSuffix(host, pattern[1:]) && len(host) > len(pattern)-1
	default:
		return pattern == host
	}
}

// Params is how many {name} parameters a template has (0 for the exact and
// prefix forms): an OpenAPI document's concrete paths win over templates.
func (p Pattern) Params() int { return p.params }
