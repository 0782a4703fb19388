package dryexec

import (
	"maps"
	"testing"
)

// TestImageAction: the image's Env under the caller's, the cwd from the
// image's WorkingDir (else /) unless the caller named one.
func TestImageAction(t *testing.T) {
	img := &ImageRoot{Env: []string{"PATH=/usr/local/bin:/bin", "LANG=C.UTF-8", "BAD", "=x"}, WorkingDir: "/app"}
	for _, tc := range []struct {
		name    string
		a       Action
		img     *ImageRoot
		wantEnv map[string]string
		wantCwd string
	}{
		{"image only", Action{}, img, map[string]string{"PATH": "/usr/local/bin:/bin", "LANG": "C.UTF-8"}, "/app"},
		{"caller wins", Action{Env: map[string]string{"PATH": "/x", "K": "v"}, Cwd: "/src"}, img,
			map[string]string{"PATH": "/x", "LANG": "C.UTF-8", "K": "v"}, "/src"},
		{"no WorkingDir", Action{}, &ImageRoot{}, map[string]string{}, "/"},
		{"relative WorkingDir", Action{}, &ImageRoot{WorkingDir: "w"}, map[string]string{}, "/w"},
		{"no image", Action{Cwd: "/h", Env: map[string]string{"A": "b"}}, nil, map[string]string{"A": "b"}, "/h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ImageAction(tc.a, tc.img)
			if !maps.Equal(got.Env, tc.wantEnv) || got.Cwd != tc.wantCwd {
				t.Errorf("env %v cwd %q, want %v %q", got.Env, got.Cwd, tc.wantEnv, tc.wantCwd)
			}
		})
	}
}

// TestImageCallerEnv: only what the caller names, never the allowlist.
func TestImageCallerEnv(t *testing.T) {
	host := map[string]string{"PATH": "/host/bin", "HOME": "/root", "TOKEN_A": "a", "TOKEN_B": "b", "TERM": "xterm"}
	get := func(k string) string { return host[k] }
	environ := []string{"PATH=/host/bin", "HOME=/root", "TOKEN_A=a", "TOKEN_B=b", "TERM=xterm"}
	for _, tc := range []struct {
		name      string
		pass, set []string
		want      map[string]string
	}{
		{"nothing named", nil, nil, map[string]string{}},
		{"a name and a pattern", []string{"TERM", "TOKEN_*"}, nil, map[string]string{"TERM": "xterm", "TOKEN_A": "a", "TOKEN_B": "b"}},
		{"set", nil, []string{"PATH=/mine"}, map[string]string{"PATH": "/mine"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ImageCallerEnv(get, environ, tc.pass, tc.set)
			if err != nil || !maps.Equal(got, tc.want) {
				t.Errorf("%v %v, want %v", got, err, tc.want)
			}
		})
	}
}
