package network

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/render"
	"github.com/dryexec/dryexec/store"
)

// TestExchangesKeptForShow: a trial's HTTP exchanges (headers and bodies,
// bounded) are kept with the stored trial and rendered by `dryexec show
// --network`; the Authorization the sandbox sent is redacted there.
func TestExchangesKeptForShow(t *testing.T) {
	requireTUN(t)
	dir := t.TempDir()
	mock := filepath.Join(dir, "mock.yaml")
	os.WriteFile(mock, []byte("routes:\n  - host: api.example.com\n    path: /orders\n    method: POST\n    status: 202\n    body: \"accepted-order-77\"\n"), 0o644)
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	spec := netSpec(t, "mock:"+mock)
	spec.TrialID = dryexec.NewTrialID()
	rec, err := st.Begin(spec.TrialID)
	if err != nil {
		t.Fatal(err)
	}
	spec.Blobs, spec.Exchanges = rec, rec
	d := runTrial(t, dir, spec, "curl", "-sS", "-H", "Authorization: Bearer sandbox-secret-42",
		"-d", "order-body-from-sandbox", "http://api.example.com/orders")
	if d.Process.Stdout != "accepted-order-77" || len(d.Network) != 3 {
		t.Fatalf("stdout %q network %+v stderr %s", d.Process.Stdout, d.Network, d.Process.Stderr)
	}
	if err := rec.Save(d); err != nil {
		t.Fatal(err)
	}
	recs, err := st.Exchanges(spec.TrialID)
	if err != nil || len(recs) == 0 {
		t.Fatalf("no exchanges kept: %v", err)
	}
	var out bytes.Buffer
	if err := render.Exchanges(&out, recs, render.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("show --network:\n%s", out.String())
	for _, want := range []string{"POST", "http://api.example.com/orders", "→ 202", "order-body-from-sandbox", "accepted-order-77", "Authorization: [redacted]"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("show --network lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String()+string(recs), "sandbox-secret-42") {
		t.Errorf("the Authorization value was kept:\n%s", out.String())
	}
	// A trial without exchanges shows that plainly.
	if none, err := st.Exchanges(dryexec.NewTrialID()); err != nil || none != nil {
		t.Fatalf("exchanges of an unknown trial: %q %v", none, err)
	}
}
