package linuxns

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/dryexec/dryexec"
)

func TestSmoke(t *testing.T) {
	dir := t.TempDir()
	r := &Rung{}
	d, err := r.Trial(context.Background(), dryexec.TrialSpec{Action: dryexec.Action{
		Argv: []string{"/bin/sh", "-c", "echo hi; echo x > a.txt; ls /tmp; id; cat /proc/self/mountinfo | head -3"},
		Cwd:  dir, Env: map[string]string{"PATH": "/usr/bin:/bin"}}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(d, "", " ")
	t.Logf("%s", b)
}
