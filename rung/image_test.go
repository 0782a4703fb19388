package rung

import (
	"errors"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// TestImageRungs: which rungs start a sandbox from an image, and that every
// other refuses one with an *IsolationUnavailableError naming itself (the
// runner and session.Open ask dryexec.CheckImage before the rung runs).
func TestImageRungs(t *testing.T) {
	img := &dryexec.ImageRoot{Ref: "x", Layers: []string{"/l"}}
	for _, tc := range []struct {
		rung   string
		images bool
	}{
		{"ns", true}, {"gvisor", true}, {"vm", true}, {Host, false},
	} {
		t.Run(tc.rung, func(t *testing.T) {
			r := build(tc.rung, Config{})
			if r == nil {
				t.Skipf("%s is not in this build", tc.rung)
			}
			err := dryexec.CheckImage(r, img)
			var iu *dryexec.IsolationUnavailableError
			switch {
			case tc.images && err != nil:
				t.Errorf("%s refused an image: %v", tc.rung, err)
			case !tc.images && (!errors.As(err, &iu) || iu.Rung != tc.rung || !strings.Contains(err.Error(), "--image")):
				t.Errorf("%s: %v, want an IsolationUnavailableError naming it", tc.rung, err)
			}
		})
	}
}
