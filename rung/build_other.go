//go:build !linux

package rung

import "github.com/dryexec/dryexec"

func build(name string) dryexec.Rung { return nil }
