package guestexe

// Self names the running binary in a way that survives its file being
// replaced or deleted while it runs.
func Self() string { return "/proc/self/exe" }
