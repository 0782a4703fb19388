//go:build !race

package escape

const raceEnabled = false
