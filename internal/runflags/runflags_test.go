package runflags

import (
	"reflect"
	"testing"
	"time"
)

// TestParse: the runs the local engine takes, read as the engine reads
// them, and the ones it leaves to the engine.
func TestParse(t *testing.T) {
	for _, tt := range []struct {
		args []string
		ok   bool
		want Local
		argv []string
	}{
		{[]string{"run", "--", "true"}, true, Local{ExitStatus: ExitDecision}, []string{"true"}},
		{[]string{"run", "--via=local", "--json", "-q", "--no-store", "--exit-status", "command", "-C", "/x", "--timeout", "2s",
			"--env", "A=1", "--env", "B", "--pass-env", "C", "--", "sh", "-c", "x --json"}, true,
			Local{Via: "local", JSON: true, Quiet: true, NoStore: true, ExitStatus: ExitCommand, Cwd: "/x", Timeout: 2 * time.Second,
				Env: []string{"A=1", "B"}, PassEnv: []string{"C"}}, []string{"sh", "-c", "x --json"}},
		{[]string{"run", "--exit-status", "nope", "--", "true"}, true, Local{ExitStatus: "nope"}, []string{"true"}}, // the caller checks it
		{[]string{"ls"}, false, Local{}, nil},
		{[]string{"run"}, false, Local{}, nil},
		{[]string{"run", "--"}, false, Local{}, nil},
		{[]string{"run", "true"}, false, Local{}, nil},
		{[]string{"run", "-q", "true", "--", "x"}, false, Local{}, nil},
		{[]string{"run", "--rung", "host", "--", "true"}, false, Local{}, nil},
		{[]string{"run", "-h", "--", "true"}, false, Local{}, nil},
		{[]string{"run", "--timeout", "soon", "--", "true"}, false, Local{}, nil},
		{[]string{"run", "--json=maybe", "--", "true"}, false, Local{}, nil},
	} {
		l, argv, ok := Parse(tt.args)
		if ok != tt.ok || (ok && (!reflect.DeepEqual(l, tt.want) || !reflect.DeepEqual(argv, tt.argv))) {
			t.Errorf("Parse(%q) = %+v %q %v, want %+v %q %v", tt.args, l, argv, ok, tt.want, tt.argv, tt.ok)
		}
	}
}
