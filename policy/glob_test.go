package policy

import (
	"path"
	"testing"
)

func TestGlob(t *testing.T) {
	tests := []struct {
		pattern, cwd, path string
		want               bool
	}{
		{"*", "", "/anything/at/all", true},
		{"**", "", "/x", true},
		{"/w/build/**", "", "/w/build/x", true},
		{"/w/build/**", "", "/w/build/a/b/c", true},
		{"/w/build/**", "", "/w/build", true}, // ** matches zero segments
		{"/w/build/**", "", "/w/buildx/y", false},
		{"/w/build/**", "", "/w/src/x", false},
		{"/w/build/**", "", "/w", false},
		{"./build/**", "/w", "/w/build/x", true},
		{"build/**", "/w", "/w/build/x", true},
		{"build/**", "/w", "/v/build/x", false},
		{"../other/*", "/w/sub", "/w/other/f", true},
		{"/w/*.txt", "", "/w/a.txt", true},
		{"/w/*.txt", "", "/w/d/a.txt", false}, // * does not cross /
		{"/w/*", "", "/w/.hidden", true},      // * matches dot files
		{"**/.ssh/**", "", "/root/.ssh/authorized_keys", true},
		{"**/.ssh/**", "", "/home/u/.sshx/k", false},
		{"**/*.pem", "", "/a/b/c.pem", true},
		{"**/*.pem", "", "/a/b/c.pem.bak", false},
		{"**/id_rsa*", "", "/h/.ssh/id_rsa.pub", true},
		{"/etc/**", "", "/etc", true},
		{"/etc/**", "", "/etcx", false},
		{"/a/**/z", "", "/a/z", true},
		{"/a/**/z", "", "/a/b/c/z", true},
		{"/a/**/z", "", "/a/b/c/zz", false},
		{"/a/?/z", "", "/a/b/z", true},
		{"/a/[bc]/z", "", "/a/c/z", true},
		{"/a/[bc]/z", "", "/a/d/z", false},
		{"/a/x*y/z", "", "/a/xy/z", true},
		{"/a/x*y/z", "", "/a/x/z", false},
	}
	for _, tt := range tests {
		g, err := compileGlob(tt.pattern, tt.cwd)
		if err != nil {
			t.Errorf("%q: %v", tt.pattern, err)
			continue
		}
		segs := splitPath(tt.path, nil)
		if got := g.match(tt.path, segs); got != tt.want {
			t.Errorf("%q (cwd %q) on %q = %v, want %v", tt.pattern, tt.cwd, tt.path, got, tt.want)
		}
		set, _ := compileGlobs("t", []string{"/never/**", tt.pattern}, tt.cwd)
		if got := set.first(tt.path, segs) != nil; got != tt.want {
			t.Errorf("set %q on %q = %v, want %v", tt.pattern, tt.path, got, tt.want)
		}
	}
}

func TestGlobRefused(t *testing.T) {
	for _, tc := range []struct{ pattern, cwd string }{
		{"", "/w"}, {"~/.ssh/**", "/w"}, {"build/**", ""}, {"build/**", "rel"}, {"/a/[/b", ""}, {"/a/**/../b", ""},
	} {
		if _, err := compileGlob(tc.pattern, tc.cwd); err == nil {
			t.Errorf("%q (cwd %q) compiled", tc.pattern, tc.cwd)
		}
	}
}

func TestCleanAbs(t *testing.T) {
	for _, p := range []string{"/", "/a", "/a/b", "/a/.b", "/a/..b", "/a/b.", "x", "", "/a/", "//a", "/a//b", "/a/./b", "/a/../b", "/.", "/..", "/a/.", "/a/.."} {
		if got, want := cleanAbs(p), p != "" && p[0] == '/' && path.Clean(p) == p; got != want {
			t.Errorf("cleanAbs(%q) = %v, want %v", p, got, want)
		}
	}
}
