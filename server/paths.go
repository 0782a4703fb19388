package server

import (
	"path"
	"strings"
)

// hasDotDot reports whether p has a ".." element: a request naming one is
// refused outright rather than cleaned, because cleaning would silently turn
// what the caller wrote into a different path.
func hasDotDot(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return true
		}
	}
	return false
}

// checkHostPath accepts an absolute, clean path without NUL bytes.
func checkHostPath(field, p string) error {
	switch {
	case p == "":
		return badRequest("%s: a path is required", field)
	case strings.ContainsRune(p, 0):
		return badRequest("%s: the path contains a NUL byte", field)
	case !strings.HasPrefix(p, "/"):
		return badRequest("%s: %q is not an absolute path", field, p)
	case hasDotDot(p):
		return badRequest("%s: %q contains .. (path traversal is refused)", field, p)
	case len(p) > 4096:
		return badRequest("%s: the path is longer than 4096 bytes", field)
	case path.Clean(p) != p && path.Clean(p)+"/" != p:
		return badRequest("%s: %q is not a clean path (want %q)", field, p, path.Clean(p))
	}
	return nil
}

// checkTreePath accepts a path relative to a tree's root that stays inside it.
func checkTreePath(field, p string) error {
	q := strings.TrimSuffix(p, "/")
	switch {
	case q == "" || q == ".":
		return badRequest("%s: an empty path", field)
	case strings.ContainsRune(q, 0):
		return badRequest("%s: the path contains a NUL byte", field)
	case strings.HasPrefix(q, "/"):
		return badRequest("%s: %q is absolute; tree entries are relative to the workspace", field, p)
	case hasDotDot(q):
		return badRequest("%s: %q contains .. (path traversal is refused)", field, p)
	}
	return nil
}
