// Package guestexe owns finding the binary the rungs start as the guest
// supervisor (`dryexec guest ROLE`). It is the host's half of that
// agreement and links none of the guest's code: the host names the guest's
// binary and speaks package wire to it, and only binaries (cmd/*) and test
// mains link package guest itself (imports_test.go guards it).
package guestexe

import (
	"os"
	"path/filepath"
)

// Env names a guest binary to start instead of the default.
const Env = "DRYEXEC_GUEST"

// Name is the guest-only binary (cmd/dryexec-guest) that `make build`
// installs beside dryexec.
const Name = "dryexec-guest"

// Executable is the binary the rungs start as the guest: $DRYEXEC_GUEST, else
// dryexec-guest beside the running executable, else the running executable
// itself (which must then call guest.MaybeMain first thing).
//
// Why a binary of its own: the guest starts on every trial, and a process pays
// for every package its binary links before main runs. The CLI links the
// decision engine, netsim's netstack, the daemon and the MCP server; the
// guest needs none of them. Measured here: 5 MB and 46 package inits against
// 42 MB and 198, 20–30 ms against 100–170 ms to start on a loaded machine.
func Executable() string { return Beside(Env, Name) }

// Beside finds one of dryexec's helper binaries: the path in the environment
// variable env if set, else the executable file name beside the running
// binary, else the running binary itself (which must then serve that role:
// every dryexec main and test main does). The guest and netsim's role process
// are found this way.
func Beside(env, name string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return Self()
}
