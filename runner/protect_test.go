package runner_test

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/receipt"
	"github.com/dryexec/dryexec/runner"
	"github.com/dryexec/dryexec/store"
)

// TestProtect: every spec gets the install's key and CA masked and its home
// hidden, once each, whatever it already says; protecting twice changes
// nothing (the daemon's warm pool compares a protected template with
// protected trial specs).
func TestProtect(t *testing.T) {
	home := t.TempDir()
	r := newRunner(t, home)
	key, ca := filepath.Join(home, receipt.KeyFile), filepath.Join(home, "netsim-ca")
	for _, tc := range []struct {
		name     string
		in       dryexec.TrialSpec
		masks    []string
		ownPaths []string
		netCADir string
	}{
		{"empty", dryexec.TrialSpec{}, []string{key, ca}, []string{home}, ca},
		{"the caller's first", dryexec.TrialSpec{Masks: []string{"/m"}, OwnPaths: []string{"/state"}},
			[]string{"/m", key, ca}, []string{"/state", home}, ca},
		{"already there", dryexec.TrialSpec{Masks: []string{key, ca}, OwnPaths: []string{home}, NetCADir: ca},
			[]string{key, ca}, []string{home}, ca},
		{"another CA dir is masked instead", dryexec.TrialSpec{NetCADir: "/ca"}, []string{key, "/ca"}, []string{home}, "/ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			inMasks := slices.Clone(in.Masks)
			got := r.Protect(in)
			if !slices.Equal(got.Masks, tc.masks) || !slices.Equal(got.OwnPaths, tc.ownPaths) || got.NetCADir != tc.netCADir {
				t.Fatalf("Protect = masks %q own %q ca %q; want %q %q %q", got.Masks, got.OwnPaths, got.NetCADir, tc.masks, tc.ownPaths, tc.netCADir)
			}
			if !slices.Equal(in.Masks, inMasks) {
				t.Fatalf("Protect changed the caller's masks: %q", in.Masks)
			}
			again := r.Protect(got)
			if !slices.Equal(again.Masks, got.Masks) || !slices.Equal(again.OwnPaths, got.OwnPaths) || again.NetCADir != got.NetCADir {
				t.Fatalf("Protect is not idempotent: %+v then %+v", got, again)
			}
		})
	}
}

// TestNewNeedsEverything: no runner without a store and a signer.
func TestNewNeedsEverything(t *testing.T) {
	home := t.TempDir()
	st, err := store.Open(home, 0)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := receipt.LoadOrCreate(home)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		st     *store.Store
		signer *receipt.Signer
	}{{"no store", nil, signer}, {"no signer", st, nil}} {
		t.Run(tc.name, func(t *testing.T) {
			if r, err := runner.New(tc.st, tc.signer); r != nil || !errors.Is(err, runner.ErrMissing) {
				t.Fatalf("New = %v, %v; want ErrMissing", r, err)
			}
		})
	}
}

// newRunner is the runner of an install at home.
func newRunner(t testing.TB, home string) *runner.Runner {
	t.Helper()
	st, err := store.Open(home, 0)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := receipt.LoadOrCreate(home)
	if err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(st, signer)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
