//go:build !linux

package rung

func notes(string) []string { return nil }
