//go:build !linux

package bootstamp

// Path is "" where there is no boot id to key a stamp on.
func Path(dir, binary string, with ...string) string { return "" }
