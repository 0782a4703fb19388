//go:build !linux

package cgroup

import "github.com/dryexec/dryexec"

// Options configures a Manager (Linux only).
type Options struct {
	Parent  string
	V2Mount string
}

// Manager is Linux only.
type Manager struct{}

// Group is Linux only.
type Group struct{}

// NewManager reports that cgroups exist only on Linux.
func NewManager(Options) (*Manager, error) {
	return nil, &UnavailableError{Reason: "cgroups exist only on Linux"}
}

// New is Linux only.
func (m *Manager) New(string, dryexec.Limits) (*Group, []string, error) {
	return nil, nil, &UnavailableError{Reason: "cgroups exist only on Linux"}
}

// Sweep has nothing to do off Linux.
func Sweep() (int, error) { return 0, nil }

// Leftovers is empty off Linux.
func Leftovers() []string { return nil }

// Probe is Linux only.
func Probe(Options) (string, error) {
	return "", &UnavailableError{Reason: "cgroups exist only on Linux"}
}
