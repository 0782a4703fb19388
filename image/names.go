package image

import (
	"fmt"
	"path"
	"strings"
)

// cleanName turns a tar entry's name into a clean path relative to the layer
// root. A leading "/" is dropped, as docker does: layers are relative to the
// image's root, whatever the tool that wrote them put first. A name that
// climbs above the root is refused, never clamped: a layer that tries is
// hostile or broken, and either way not to be unpacked.
func cleanName(n string) (string, error) {
	if strings.ContainsRune(n, 0) {
		return "", fmt.Errorf("%w: %q holds a NUL", ErrUnsafeLayer, n)
	}
	c := path.Clean(strings.TrimLeft(n, "/"))
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w: %q climbs out of the layer", ErrUnsafeLayer, n)
	}
	return c, nil
}

// parentOf is p's directory, "." at the root.
func parentOf(p string) string { return path.Dir(p) }
