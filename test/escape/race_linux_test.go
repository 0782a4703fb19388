//go:build race

package escape

// raceEnabled: this test binary, which the rung starts as the guest, is
// instrumented by the race detector (and needs far more address space).
const raceEnabled = true
