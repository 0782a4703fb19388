package guest

import (
	"os"
	"path/filepath"
)

// ExeEnv names a guest binary to start instead of the default.
const ExeEnv = "DRYEXEC_GUEST"

// ExeName is the guest-only binary (cmd/dryexec-guest) that `make build`
// installs beside dryexec.
const ExeName = "dryexec-guest"

// Executable is the binary the rungs start as the guest: $DRYEXEC_GUEST, else
// dryexec-guest beside the running executable, else the running executable
// itself (which must then call MaybeMain first thing).
//
// Why a binary of its own: the guest starts on every trial, and a process pays
// for every package its binary links before main runs. The CLI links the
// decision engine, netsim's netstack, the daemon and the MCP server; the
// guest needs none of them. Measured here: 5 MB and 46 package inits against
// 42 MB and 198, 20–30 ms against 100–170 ms to start on a loaded machine.
func Executable() string {
	if p := os.Getenv(ExeEnv); p != "" {
		return p
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), ExeName)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return selfExe()
}
