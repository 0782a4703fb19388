package dryexec

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

func TestSandboxEnv(t *testing.T) {
	caller := map[string]string{"PATH": "/bin", "HOME": "/home/u", "AWS_SECRET_ACCESS_KEY": "s3cr3t",
		"GITHUB_TOKEN": "ghp_x", "LC_TIME": "C", "LC_ALL": "C.UTF-8", "GOFLAGS": "-mod=mod", "GOPATH": "/go", "EMPTY": ""}
	var environ []string
	for k, v := range caller {
		environ = append(environ, k+"="+v)
	}
	getenv := func(k string) string { return caller[k] }
	tests := []struct {
		name  string
		names []string
		set   []string
		want  map[string]string
		err   bool
	}{
		{name: "allowlist only: no tokens", want: map[string]string{"PATH": "/bin", "HOME": "/home/u", "LC_TIME": "C", "LC_ALL": "C.UTF-8"}},
		{name: "named", names: []string{"GOFLAGS", "EMPTY", "UNSET"},
			want: map[string]string{"PATH": "/bin", "HOME": "/home/u", "LC_TIME": "C", "LC_ALL": "C.UTF-8", "GOFLAGS": "-mod=mod"}},
		{name: "prefix", names: []string{"GO*"},
			want: map[string]string{"PATH": "/bin", "HOME": "/home/u", "LC_TIME": "C", "LC_ALL": "C.UTF-8", "GOFLAGS": "-mod=mod", "GOPATH": "/go"}},
		{name: "set wins", set: []string{"PATH=/x", "NEW=a=b"},
			want: map[string]string{"PATH": "/x", "HOME": "/home/u", "LC_TIME": "C", "LC_ALL": "C.UTF-8", "NEW": "a=b"}},
		{name: "bad name", names: []string{"A=B"}, err: true},
		{name: "bad star", names: []string{"A*B*"}, err: true},
		{name: "bad set", set: []string{"NOVALUE"}, err: true},
		{name: "empty set name", set: []string{"=x"}, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SandboxEnv(getenv, environ, tt.names, tt.set)
			if tt.err {
				if !errors.Is(err, ErrBadAction) {
					t.Fatalf("err = %v, want ErrBadAction", err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestSandboxEnvLocalesWithoutEnviron(t *testing.T) {
	got, err := SandboxEnv(func(k string) string {
		return map[string]string{"LC_TIME": "C", "LC_PAPER": "a4", "LC_BOGUS": "x", "SECRET": "s"}[k]
	}, nil, []string{"SEC*"}, nil)
	if err != nil || !reflect.DeepEqual(got, map[string]string{"LC_TIME": "C", "LC_PAPER": "a4"}) {
		t.Fatalf("got %v, %v", got, err)
	}
}

func TestMaskPaths(t *testing.T) {
	got, err := MaskPaths([]string{"/home/u", "/root", "/"}, []string{"~/.config/x", "/srv/keys/", "/home/u/.ssh"}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"/home/u/.ssh": true, "/root/.aws": true, "/home/u/.config/x": true, "/srv/keys": true, "/home/u/.docker/config.json": true}
	seen := map[string]int{}
	for _, p := range got {
		seen[p]++
		if seen[p] > 1 {
			t.Errorf("%s twice", p)
		}
	}
	for p := range want {
		if seen[p] == 0 {
			t.Errorf("missing %s in %v", p, got)
		}
	}
	if seen["/.ssh"] > 0 {
		t.Errorf("a home of / must not mask /.ssh")
	}
	none, _ := MaskPaths([]string{"/home/u"}, []string{"/a"}, true)
	if !reflect.DeepEqual(none, []string{"/a"}) {
		t.Errorf("noDefaults: %v", none)
	}
	for _, bad := range []string{"rel", "/", "/a\x00b", "~"} {
		if _, err := MaskPaths(nil, []string{bad}, true); !errors.Is(err, ErrBadAction) {
			t.Errorf("mask %q: err = %v", bad, err)
		}
	}
}

func TestLimitsCheck(t *testing.T) {
	for _, l := range []Limits{{MemoryBytes: 1}, {Pids: 2}, {CPUs: 0.001}, {CPUWeight: 20000},
		{MemoryBytes: -2}, {Pids: -5}, {CPUs: math.NaN()}, {CPUs: math.Inf(1)}} {
		if err := l.Check(); !errors.Is(err, ErrBadAction) {
			t.Errorf("%+v: %v", l, err)
		}
	}
	for _, l := range []Limits{{}, {MemoryBytes: -1, Pids: -1, CPUs: -1}, {MemoryBytes: 64 << 20, Pids: 64, CPUs: 0.5, CPUWeight: 50}} {
		if err := l.Check(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
}
