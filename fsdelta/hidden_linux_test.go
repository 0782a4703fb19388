package fsdelta

import (
	"slices"
	"testing"
)

// TestIsHidden: a path of any mount at or beneath a hidden host path is
// hidden — a name that only starts the same is not — and Crossed names the
// hidden host path, whichever mount reached it.
func TestIsHidden(t *testing.T) {
	d := NewDiffer([]Mount{{Path: "/"}, {Path: "/home"}, {Path: "/home/u/.ssh"}}, nil, 0)
	defer d.Close()
	d.SetHidden([]string{"/home/u/.ssh", "/srv/keys"})
	tests := []struct {
		m      int
		p      string
		hidden bool
	}{
		{0, "home/u/.ssh", true},
		{0, "home/u/.ssh/id_rsa", true},
		{0, "home/u/.sshx", false},
		{0, "home/u", false},
		{1, "u/.ssh/id_rsa", true},
		{1, "u/.ssh", true},
		{1, "u/.ss", false},
		{2, "", true}, // the mount is the hidden path
		{2, "id_rsa", true},
		{0, "srv/keys/a", true},
		{0, "srv/keysx", false},
		{0, "srv", false},
		{1, "srv/keys", false}, // not beneath /home
	}
	for _, tt := range tests {
		if got := d.isHidden(tt.m, tt.p); got != tt.hidden {
			t.Errorf("isHidden(%d, %q) = %v, want %v", tt.m, tt.p, got, tt.hidden)
		}
	}
	if got := d.Crossed(); !slices.Equal(got, []string{"/home/u/.ssh", "/srv/keys"}) {
		t.Errorf("Crossed() = %q", got)
	}
}
