//go:build linux && !amd64

package guest

// stubELF: no native command stub for this architecture; the guest binary
// plays the stub (wire.RoleStub).
const stubELF = ""
