package ca

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestCreatedOnceAndPrivate: the first use creates the CA with its key in a
// 0600 file inside a 0700 directory; later uses load the same CA.
func TestCreatedOnceAndPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	a, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, filepath.Join(dir, FileName): 0o600} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v want %v (%v)", path, fi.Mode(), want, err)
		}
	}
	b, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if string(a.CertPEM()) != string(b.CertPEM()) {
		t.Fatal("a second load made a new CA")
	}
}

// TestConcurrentFirstUse: racing first uses converge on one CA.
func TestConcurrentFirstUse(t *testing.T) {
	dir := t.TempDir()
	const n = 8
	pems := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := LoadOrCreate(dir)
			if err != nil {
				t.Error(err)
				return
			}
			pems[i] = string(c.CertPEM())
		}()
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if pems[i] != pems[0] {
			t.Fatal("racing creators ended with different CAs")
		}
	}
}

// TestLeaves: leaves verify for their name (DNS or IP) against the CA alone,
// not for another name, and are cached.
func TestLeaves(t *testing.T) {
	c, err := LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.Certificate())
	for _, name := range []string{"api.example.com", "203.0.113.7", "2001:db8::1"} {
		l, err := c.Leaf(name)
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(l.Certificate[0])
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "other.example.com", Roots: pool}); err == nil {
			t.Errorf("%s's leaf verified for another name", name)
		}
		again, _ := c.Leaf(name)
		if again != l {
			t.Errorf("%s: leaf not cached", name)
		}
	}
	if _, err := c.Leaf(""); err == nil {
		t.Error("empty name signed")
	}
}

func TestBundle(t *testing.T) {
	c, err := LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := c.Bundle([]byte("SYSTEM"))
	pool := x509.NewCertPool()
	if string(b[:7]) != "SYSTEM\n" || !pool.AppendCertsFromPEM(b) {
		t.Fatalf("bundle %q", b)
	}
}

// TestCorruptCA: a damaged CA file is an error, never silently replaced
// (the sandboxes' trust stores hold the old certificate).
func TestCorruptCA(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, FileName), []byte("garbage"), 0o600)
	if _, err := LoadOrCreate(dir); err == nil {
		t.Fatal("corrupt CA accepted")
	}
}
