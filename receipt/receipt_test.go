package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/dryexec/dryexec"
)

func TestCanonical(t *testing.T) {
	tests := []struct{ name, in, want string }{
		// RFC 8785 §3.2.3's example, with the receipt member added: it is left out.
		{"rfc8785", `{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false], "receipt": {"x": 1}}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		{"members sorted, whitespace gone", "{ \"b\" : 1 ,\n\t\"a\" : [ 2 , 3 ] }", `{"a":[2,3],"b":1}`},
		{"nested receipt kept", `{"x":{"receipt":1}}`, `{"x":{"receipt":1}}`},
		{"integers exact, -0 is 0", `{"a":-0,"b":12345678901234567890,"c":1.0,"d":1e-7,"e":0.66}`,
			`{"a":0,"b":12345678901234567890,"c":1,"d":1e-7,"e":0.66}`},
		{"escapes", `{"s":"\b\t\n\f\r\u0001\u001f<>&\u2028é"}`, `{"s":"\b\t\n\f\r\u0001\u001f<>&` + "\u2028é" + `"}`},
		// UTF-16 order: U+1F600 (D83D DE00) sorts before U+FB01, after U+20AC.
		{"utf16 order", `{"\ufb01":1,"\ud83d\ude00":2,"\u20ac":3,"z":4}`, `{"z":4,"€":3,"😀":2,"ﬁ":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Canonical([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestCanonicalRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"duplicate member":        `{"a":1,"a":2}`,
		"nested duplicate":        `{"x":{"p":1,"p":1}}`,
		"invalid utf-8":           "{\"a\":\"\xff\"}",
		"trailing data":           `{"a":1} {"b":2}`,
		"not an object":           `[1,2]`,
		"truncated":               `{"a":[1,`,
		"too deep":                strings.Repeat("[", 100) + strings.Repeat("]", 100),
		"too deep inside objects": `{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
	} {
		if _, err := Canonical([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func sampleDelta() *dryexec.StateDelta {
	d := &dryexec.StateDelta{TrialID: "tr_aaaaaaaaaaaaaaaaaaaa", Rung: "ns",
		Action:   dryexec.Action{Argv: []string{"sh", "-c", "echo hi > x"}, Cwd: "/w", Env: map[string]string{"PATH": "/bin", "é": "\u2028"}},
		Files:    []dryexec.FileChange{{Path: "/w/x", Op: dryexec.OpCreate, Kind: dryexec.KindFile, Size: 3, Mode: "0644", Diff: "+hi\n"}},
		Decision: dryexec.Decision{Choice: "auto_commit", RiskScore: 0.0001, Reasons: []string{"info: fine"}}}
	d.Normalize()
	d.ComputeTotals()
	return d
}

func TestSignVerify(t *testing.T) {
	dir := t.TempDir()
	s, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	d := sampleDelta()
	if err := s.Sign(d); err != nil {
		t.Fatal(err)
	}
	if d.Receipt.KeyID != s.KeyID() || len(d.Receipt.DeltaSHA256) != 64 || d.Receipt.Signature == "" {
		t.Fatalf("receipt %+v", d.Receipt)
	}
	doc, _ := json.MarshalIndent(d, "", "  ")
	if _, err := Verify(doc, s.PublicKey()); err != nil {
		t.Fatalf("a fresh receipt does not verify: %v", err)
	}
	// Re-encoding (other whitespace, member order) is not tampering.
	var generic map[string]any
	json.Unmarshal(doc, &generic)
	re, _ := json.Marshal(generic)
	if _, err := Verify(re, s.PublicKey()); err != nil {
		t.Fatalf("re-encoded delta: %v", err)
	}

	edit := func(f func(*dryexec.StateDelta)) []byte {
		var c dryexec.StateDelta
		json.Unmarshal(doc, &c)
		f(&c)
		b, _ := json.Marshal(&c)
		return b
	}
	other, _ := LoadOrCreate(t.TempDir())
	tests := []struct {
		name string
		doc  []byte
		key  func() []byte
		want error
	}{
		{"path changed", edit(func(c *dryexec.StateDelta) { c.Files[0].Path = "/etc/passwd" }), nil, ErrTampered},
		{"decision changed", edit(func(c *dryexec.StateDelta) { c.Decision.Choice = "block" }), nil, ErrTampered},
		{"reason dropped", edit(func(c *dryexec.StateDelta) { c.Decision.Reasons = nil }), nil, ErrTampered},
		{"exit code changed", edit(func(c *dryexec.StateDelta) { c.Process.ExitCode = 1 }), nil, ErrTampered},
		{"file added", edit(func(c *dryexec.StateDelta) { c.Files = append(c.Files, c.Files[0]) }), nil, ErrTampered},
		{"member added", bytes.Replace(doc, []byte(`"rung": "ns",`), []byte(`"rung": "ns", "extra": 1,`), 1), nil, ErrTampered},
		{"hash recomputed, signature not", func() []byte {
			b := edit(func(c *dryexec.StateDelta) { c.Files[0].Size = 4 })
			sum, _ := Digest(b)
			var c dryexec.StateDelta
			json.Unmarshal(b, &c)
			c.Receipt.DeltaSHA256 = sum
			b, _ = json.Marshal(&c)
			return b
		}(), nil, ErrBadSignature},
		{"signature garbled", edit(func(c *dryexec.StateDelta) { c.Receipt.Signature = "AAAA" + c.Receipt.Signature[4:] }), nil, ErrBadSignature},
		{"signature not base64", edit(func(c *dryexec.StateDelta) { c.Receipt.Signature = "!!" }), nil, ErrBadSignature},
		{"no receipt", edit(func(c *dryexec.StateDelta) { c.Receipt = dryexec.Receipt{} }), nil, ErrNoReceipt},
		{"another install's key", doc, func() []byte { return other.PublicKey() }, ErrWrongKey},
		{"key id swapped to the verifier's, signed by another", func() []byte {
			c := sampleDelta()
			other.Sign(c)
			c.Receipt.KeyID = s.KeyID()
			b, _ := json.Marshal(c)
			return b
		}(), nil, ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pub := s.PublicKey()
			if tt.key != nil {
				pub = tt.key()
			}
			_, err := Verify(tt.doc, pub)
			if !errors.Is(err, tt.want) || !errors.Is(err, ErrVerify) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestKeyFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "home")
	s1, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	s2, err := LoadOrCreate(dir)
	if err != nil || s2.KeyID() != s1.KeyID() {
		t.Fatalf("reload: %v %s %s", err, s2.KeyID(), s1.KeyID())
	}
	pub, err := LoadPublicKey(filepath.Join(dir, PublicKeyFile))
	if err != nil || KeyID(pub) != s1.KeyID() {
		t.Fatalf("public key file: %v", err)
	}
	if pub, err := LoadPublicKey(filepath.Join(dir, KeyFile)); err != nil || KeyID(pub) != s1.KeyID() {
		t.Fatalf("public half of the private key file: %v", err)
	}
	// A key others can read is refused, like ssh does.
	os.Chmod(filepath.Join(dir, KeyFile), 0o644)
	if _, err := LoadOrCreate(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable key accepted: %v", err)
	}
	os.WriteFile(filepath.Join(t.TempDir(), "x"), nil, 0o600)
	bad := filepath.Join(t.TempDir(), "bad.pem")
	os.WriteFile(bad, []byte("not a key"), 0o600)
	if _, err := LoadPublicKey(bad); err == nil {
		t.Fatal("garbage accepted as a key")
	}
}

// TestConcurrentFirstUse: processes starting at once on a fresh install agree
// on one key.
func TestConcurrentFirstUse(t *testing.T) {
	dir := t.TempDir()
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			s, err := LoadOrCreate(dir)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = s.KeyID()
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("key ids differ: %q", ids)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Fatalf("left behind: %v", ents)
	}
}
