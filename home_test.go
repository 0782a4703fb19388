package dryexec

import (
	"errors"
	"testing"
)

// TestDefaultHome: the order of the variables that name dryexec's state dir.
func TestDefaultHome(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
		err  error
	}{
		{"DRYEXEC_HOME wins", map[string]string{"DRYEXEC_HOME": "/d", "XDG_STATE_HOME": "/x", "HOME": "/h"}, "/d", nil},
		{"then XDG_STATE_HOME", map[string]string{"XDG_STATE_HOME": "/x", "HOME": "/h"}, "/x/dryexec", nil},
		{"then HOME", map[string]string{"HOME": "/h"}, "/h/.local/state/dryexec", nil},
		{"none", map[string]string{}, "", ErrNoHome},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DefaultHome(func(k string) string { return tc.env[k] })
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Fatalf("DefaultHome = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}
