package server_test

import (
	"encoding/json"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/server"
)

// TestTrialEnvExactAndContentCap: with env_exact the trial's environment is
// the request's env (and PWD) and nothing of the daemon's; without it the
// daemon's allowlisted variables come in. pass_env with env_exact, and a
// content_cap below -1, are bad requests. /v1/version names the daemon's
// store (home), for `dryexec run` to check.
func TestTrialEnvExactAndContentCap(t *testing.T) {
	requireNS(t)
	d := startDaemon(t, server.Config{Getenv: func(k string) string {
		return map[string]string{"PATH": "/usr/bin:/bin", "LANG": "daemon-lang"}[k]
	}}, server.HandlerOptions{})
	dir := t.TempDir()
	tests := []struct {
		name     string
		req      map[string]any
		status   int
		wantLANG string // in the trial's env, when it ran
	}{
		{"the daemon's environment under the request's", map[string]any{"env": map[string]string{"A": "b"}}, 201, "daemon-lang"},
		{"env_exact: the request's alone", map[string]any{"env": map[string]string{"A": "b", "PATH": "/bin"}, "env_exact": true, "content_cap": 4096}, 201, ""},
		{"env_exact with pass_env", map[string]any{"env_exact": true, "pass_env": []string{"LANG"}}, 400, ""},
		{"content_cap below -1", map[string]any{"content_cap": -2}, 400, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := map[string]any{"argv": []string{"/bin/true"}, "cwd": dir}
			for k, v := range tt.req {
				req[k] = v
			}
			resp, body := d.do(t, "POST", "/v1/trials", req)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if tt.status != 201 {
				return
			}
			var delta dryexec.StateDelta
			if err := json.Unmarshal(body, &delta); err != nil {
				t.Fatal(err)
			}
			if got := delta.Action.Env["LANG"]; got != tt.wantLANG {
				t.Errorf("LANG %q, want %q (env %v)", got, tt.wantLANG, delta.Action.Env)
			}
			if delta.Action.Env["A"] != "b" || delta.Action.Env["PWD"] != dir {
				t.Errorf("env %v: want A=b and PWD=%s", delta.Action.Env, dir)
			}
		})
	}
	resp, body := d.do(t, "GET", "/v1/version", nil)
	var v struct{ Home string }
	if resp.StatusCode != 200 || json.Unmarshal(body, &v) != nil || v.Home != d.home {
		t.Fatalf("version: %d %s, want home %s", resp.StatusCode, body, d.home)
	}
}
