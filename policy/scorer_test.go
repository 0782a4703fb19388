package policy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testwait"
)

// scriptScorer writes an executable shell script and returns its command.
func scriptScorer(t *testing.T, body string) []string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "scorer.sh")
	if err := os.WriteFile(f, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"/bin/sh", f}
}

func TestExternalScorerCommand(t *testing.T) {
	dir := t.TempDir()
	seen := filepath.Join(dir, "seen.json")
	tests := []struct {
		name    string
		script  string
		timeout int64
		delta   func(*dryexec.StateDelta)
		weights [2]float64
		choice  string
		score   float64
		reason  string
	}{
		// The deterministic score of a failed command is 0.3 (review anyway).
		{"bare number, default blend", "cat > " + seen + "; echo 0.9", 0, nil, [2]float64{}, Review, 0.66,
			"scorer: external score 0.90, blended 0.40×0.30 + 0.60×0.90 = 0.66"},
		{"json answer", `cat >/dev/null; echo '{"score": 0.1}'`, 0, nil, [2]float64{}, Review, 0.18, "external score 0.10"},
		{"custom weights", "cat >/dev/null; echo 1", 0, nil, [2]float64{1, 1}, Review, 0.65, "blended 0.50×0.30 + 0.50×1.00 = 0.65"},
		{"the external score can lift a clean action into review", "cat >/dev/null; echo 1", 0,
			func(d *dryexec.StateDelta) { d.Process.ExitCode = 0 }, [2]float64{}, Review, 0.6, "review: risk 0.60 is above the review threshold"},
		{"failure keeps the deterministic decision", "cat >/dev/null; echo broken >&2; exit 7", 0, nil, [2]float64{}, Review, 0.3,
			"scorer: failed (/bin/sh: exit status 7: broken); the deterministic decision stands"},
		{"garbage answer", "cat >/dev/null; echo lots", 0, nil, [2]float64{}, Review, 0.3, `answer "lots" is not a number`},
		{"out of range", "cat >/dev/null; echo 1.5", 0, nil, [2]float64{}, Review, 0.3, "outside [0,1]"},
		{"timeout", "sleep 5; echo 0", 100, nil, [2]float64{}, Review, 0.3, "failed (timed out after 100ms); the deterministic decision stands"},
		// The scorer waits for its child's pid file (the marker that the child
		// runs) before it sleeps into the timeout, so the kill finds a child.
		{"timeout with a child holding stdout", "sh -c 'echo $$ > " + filepath.Join(dir, "child.pid.tmp") + "; mv " + filepath.Join(dir, "child.pid.tmp") + " " + filepath.Join(dir, "child.pid") + "; exec sleep 5' & while [ ! -e " + filepath.Join(dir, "child.pid") + " ]; do :; done; sleep 5", 1000, nil, [2]float64{}, Review, 0.3, "timed out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Default()
			p.Scorer = &Scorer{Command: scriptScorer(t, tt.script), TimeoutMS: tt.timeout,
				DeterministicWeight: tt.weights[0], ExternalWeight: tt.weights[1]}
			e, err := Compile(p)
			if err != nil {
				t.Fatal(err)
			}
			d := baseDelta()
			d.Process.ExitCode = 1
			if tt.delta != nil {
				tt.delta(d)
			}
			start := time.Now()
			r := e.Decide(context.Background(), d)
			if time.Since(start) > 3*time.Second {
				t.Errorf("the scorer's timeout did not bound the decision")
			}
			if r.Decision.Choice != tt.choice || r.Decision.RiskScore != tt.score {
				t.Errorf("%s %v, want %s %v: %q", r.Decision.Choice, r.Decision.RiskScore, tt.choice, tt.score, r.Decision.Reasons)
			}
			if !strings.Contains(strings.Join(r.Decision.Reasons, "\n"), tt.reason) {
				t.Errorf("no reason contains %q: %q", tt.reason, r.Decision.Reasons)
			}
		})
	}
	// The scorer's children died with it (its group was SIGKILLed before
	// Decide returned; the orphan may take a moment to be reaped).
	if b, err := os.ReadFile(filepath.Join(dir, "child.pid")); err != nil {
		t.Error("the scorer's child did not start")
	} else if !gone(strings.TrimSpace(string(b))) {
		t.Error("a scorer's child outlived the decision")
	}
	// The scorer received the delta as JSON.
	var got dryexec.StateDelta
	if b, err := os.ReadFile(seen); err != nil || json.Unmarshal(b, &got) != nil || got.Files[0].Path != "/w/a.txt" {
		t.Fatalf("the scorer saw %+v (%v)", got.Files, err)
	}
}

// TestExternalScorerNotConsultedWhenBlocked: a blocked action never reaches
// the scorer (it would see the delta; and no score could unblock it).
func TestExternalScorerNotConsultedWhenBlocked(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "consulted")
	p := Default()
	p.Scorer = &Scorer{Command: scriptScorer(t, "touch "+marker+"; echo 0")}
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++; io.WriteString(w, "0") }))
	defer srv.Close()
	for _, s := range []*Scorer{p.Scorer, {URL: srv.URL}} {
		p.Scorer = s
		e, err := Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		d := baseDelta()
		d.Files[0].Path = "/etc/shadow"
		r := e.Decide(context.Background(), d)
		if r.Decision.Choice != Block || !strings.Contains(strings.Join(r.Decision.Reasons, "\n"), "scorer: not consulted: the action is already blocked") {
			t.Fatalf("%+v", r.Decision)
		}
	}
	if _, err := os.Stat(marker); err == nil || hits != 0 {
		t.Fatal("the scorer was consulted for a blocked action")
	}
}

func TestExternalScorerHTTP(t *testing.T) {
	var body []byte
	var ctype string
	mux := http.NewServeMux()
	mux.HandleFunc("/score", func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		ctype = r.Header.Get("Content-Type")
		io.WriteString(w, `{"score": 0.2}`)
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusInternalServerError) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // so that the server notices the client leaving
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/score", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/huge", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat(" ", maxScorerAnswer+10) + "0"))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	tests := []struct {
		path   string
		score  float64
		reason string
	}{
		{"/score", 0.12, "scorer: external score 0.20, blended 0.40×0.00 + 0.60×0.20 = 0.12"},
		{"/fail", 0, "answered 500 Internal Server Error"},
		{"/slow", 0, "timed out after 200ms"},
		{"/redirect", 0, "answered 307"},
		{"/huge", 0, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			p := Default()
			p.Scorer = &Scorer{URL: srv.URL + tt.path, TimeoutMS: 200}
			e, err := Compile(p)
			if err != nil {
				t.Fatal(err)
			}
			r := e.Decide(context.Background(), baseDelta())
			if r.Decision.Choice != AutoCommit || r.Decision.RiskScore != tt.score ||
				!strings.Contains(strings.Join(r.Decision.Reasons, "\n"), tt.reason) {
				t.Fatalf("%+v, want score %v and %q", r.Decision, tt.score, tt.reason)
			}
		})
	}
	var d dryexec.StateDelta
	if json.Unmarshal(body, &d) != nil || d.Action.Cwd != "/w" || ctype != "application/json" {
		t.Fatalf("the endpoint got %q (%s)", body, ctype)
	}
}

// gone reports whether process pid has exited (is absent or a zombie) within
// a second.
func gone(pid string) bool {
	return testwait.Until(time.Second, func() bool {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return true
		}
		_, rest, ok := strings.Cut(string(b), ") ")
		return ok && strings.HasPrefix(rest, "Z")
	}) == nil
}
