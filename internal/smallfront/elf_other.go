//go:build !(linux && amd64)

package smallfront

// frontELF is empty where the small front is not built: Install says so.
const frontELF = ""
