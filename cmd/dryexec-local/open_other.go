//go:build !linux

package main

import "github.com/dryexec/dryexec/internal/localrun"

// opener is nil where there is no ns rung: every invocation goes to the
// engine.
func opener() localrun.Opener { return nil }
