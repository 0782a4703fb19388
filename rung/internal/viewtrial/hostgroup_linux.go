package viewtrial

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup"
)

// HostGroup is the cgroup that holds a sandbox's host side (the view guest
// and what it becomes: runsc and its sandbox, QEMU and its VM), with the
// host's limits, and reads back what they did against the limits the caller
// asked for.
type HostGroup struct {
	// Group is nil when this host cannot make one (Warnings says so).
	Group *cgroup.Group
	// Warnings are the limits this host does not enforce.
	Warnings []string
	asked    dryexec.Limits
	mu       sync.Mutex   // guards last
	last     cgroup.Stats // the group's, at the last Hits
}

// NewHostGroup makes the group name with the host's limits host, for a
// sandbox asked for asked (what Hits names): what the sandbox's own
// processes get, and what its runtime needs on top. A host without cgroups
// it may use is no error: the group is nil and a warning says so.
func NewHostGroup(opts cgroup.Options, name string, asked, host dryexec.Limits) (*HostGroup, error) {
	h := &HostGroup{}
	m, err := cgroup.NewManager(opts)
	if err == nil {
		h.Group, h.Warnings, err = m.New(name, host)
		if err == nil {
			h.asked = m.Resolve(asked)
		}
	}
	switch {
	case errors.Is(err, cgroup.ErrUnavailable):
		h.Group = nil
		h.Warnings = append(h.Warnings, fmt.Sprintf("%v: the sandbox's memory and CPU are not limited", err))
	case err != nil:
		return nil, err
	}
	if h.Group != nil {
		h.last = h.Group.Stats()
	}
	return h, nil
}

// Place has a child started with attr begin inside the group (v2: clone
// into its directory).
func (h *HostGroup) Place(attr *syscall.SysProcAttr) {
	if h.Group != nil && h.Group.CgroupFD() >= 0 {
		attr.UseCgroupFD, attr.CgroupFD = true, h.Group.CgroupFD()
	}
}

// Attach moves pid into the group's v1 hierarchies (on a hybrid host the
// v2 placement of Place holds no memory or pids controller): before pid
// starts anything.
func (h *HostGroup) Attach(pid int) error {
	if h.Group == nil {
		return nil
	}
	if err := h.Group.Attach(pid); err != nil {
		return fmt.Errorf("putting the sandbox in its cgroup: %w", err)
	}
	return nil
}

// Hits are the limits hit since the last call, named by the limits asked
// for.
func (h *HostGroup) Hits() []dryexec.Violation {
	if h.Group == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.Group.Stats()
	v := cgroup.Violations(h.asked, 0, h.last, now)
	h.last = now
	return v
}

// Asked are the limits asked for, defaults filled in (zero without a group).
func (h *HostGroup) Asked() dryexec.Limits { return h.asked }

// Remove kills what is left in the group and removes it; safe to repeat.
func (h *HostGroup) Remove() error {
	if h.Group == nil {
		return nil
	}
	err := h.Group.Remove()
	h.Group = nil
	return err
}
