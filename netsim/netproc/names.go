package netproc

// The names by which a program finds and starts the role, on every
// platform: a binary that does not play the role refuses it by them
// (cmd/dryexec-local), and an installer names the role binaries by them.

// Role is the first argument that makes a binary run the role
// (netrole.MaybeMain).
const Role = "netsim-role"

// IsRole reports whether args (os.Args) start a binary as the role: what
// netrole.MaybeMain runs, and what a binary that does not link the role
// refuses (cmd/dryexec-local).
func IsRole(args []string) bool { return len(args) > 1 && args[1] == Role }

// ExeEnv names the binary to start in the role instead of the default.
const ExeEnv = "DRYEXEC_NETSIM"

// ExeName is the role-only binary (cmd/dryexec-netsim) `make build` puts
// beside dryexec.
const ExeName = "dryexec-netsim"

// OpenAPIExeName is the role binary (cmd/dryexec-netsim-openapi) `make
// build` puts beside dryexec for sandboxes whose mock file names OpenAPI
// documents: it alone links the OpenAPI mocks (netsim/mock/openapi), whose
// libraries' initialisation (kin-openapi, and a JSON Schema compiler that
// compiles its meta-schemas in init) took 11 ms of a 24 ms start here, so
// the role of every other trial does not pay for it.
const OpenAPIExeName = "dryexec-netsim-openapi"

// OpenAPIExeEnv names the binary to start in the role, instead of the
// default, for a mock file naming OpenAPI documents.
const OpenAPIExeEnv = "DRYEXEC_NETSIM_OPENAPI"
