package receipt

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"testing"
)

// The seedKey's signatures are crypto/ed25519's, byte for byte (Ed25519 is
// deterministic), for random keys and messages of every length class, and
// so is its public key; a Signer past fastSigns signs the same way.
func TestSeedKeySignsAsCryptoEd25519(t *testing.T) {
	for i := range 200 {
		seed := make([]byte, ed25519.SeedSize)
		rand.Read(seed)
		msg := make([]byte, i*7%300)
		rand.Read(msg)
		want := ed25519.NewKeyFromSeed(seed)
		ks, err := newKeySigner(seed)
		if err != nil {
			t.Fatal(err)
		}
		k := ks.key
		if !bytes.Equal(k.pub, want.Public().(ed25519.PublicKey)) {
			t.Fatalf("seed %x: public key %x, crypto/ed25519 %x", seed, k.pub, want.Public())
		}
		if !bytes.Equal(ks.priv, want) {
			t.Fatalf("seed %x: private key differs from crypto/ed25519's", seed)
		}
		got, exp := k.sign(msg), ed25519.Sign(want, msg)
		if !bytes.Equal(got, exp) {
			t.Fatalf("seed %x msg %x: signature %x, crypto/ed25519 %x", seed, msg, got, exp)
		}
	}
	seed := bytes.Repeat([]byte{7}, ed25519.SeedSize)
	s, err := newKeySigner(seed)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fastSigns + 3 {
		msg := fmt.Appendf(nil, "message %d", i)
		if got, want := s.sign(msg), ed25519.Sign(ed25519.NewKeyFromSeed(seed), msg); !bytes.Equal(got, want) {
			t.Fatalf("signature %d: %x, want %x", i+1, got, want)
		}
	}
	if _, err := newKeySigner(seed[:31]); err == nil {
		t.Fatal("a 31-byte seed was taken")
	}
}

// parseSeed reads what x509 writes, and refuses what x509 refuses (what
// its own parse does not take goes to x509, so it accepts no more).
func TestParseSeed(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := parseSeed(der)
	if err != nil || !bytes.Equal(seed, priv.Seed()) {
		t.Fatalf("parseSeed = %x, %v; want %x", seed, err, priv.Seed())
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	for _, tc := range []struct {
		name    string
		der     []byte
		notEd   bool
		anyFail bool
	}{
		{"an ECDSA key", ecDER, true, true},
		{"truncated", der[:len(der)-3], false, true},
		{"empty", nil, false, true},
	} {
		_, err := parseSeed(tc.der)
		if (err != nil) != tc.anyFail || errors.Is(err, errNotEd25519) != tc.notEd {
			t.Errorf("%s: err %v; want failure %v, not-ed25519 %v", tc.name, err, tc.anyFail, tc.notEd)
		}
	}
}
