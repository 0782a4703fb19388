// Package ca owns netsim's per-install certificate authority: it is created on
// first use in a directory of its own (key and certificate in one file, mode
// 0600, so a half-written pair can never be seen), and it signs a short-lived
// leaf certificate per host name or address the sandbox connects to, cached in
// memory. The sandbox trusts the CA through a bundle (system roots + this CA)
// that the guest binds over the system trust store.
package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// FileName is the file in the CA directory holding the CA certificate and its
// private key (PEM, mode 0600).
const FileName = "netsim-ca.pem"

// CertFileName is the CA certificate alone (PEM, mode 0644), for people and
// tools that want to inspect or trust it by hand.
const CertFileName = "netsim-ca.crt"

// maxLeaves bounds the leaf cache; a trial that connects to more names than
// this just pays for re-signing.
const maxLeaves = 4096

// leafLifetime is short because leaves are never stored: a new process signs
// new ones.
const leafLifetime = 7 * 24 * time.Hour

// CA signs leaf certificates for the hosts a sandbox connects to.
type CA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte

	// mu guards leaves.
	mu     sync.Mutex
	leaves map[string]*tls.Certificate
	// leafKey is shared by every leaf: generating a key per host would cost
	// more than the handshake, and the key never leaves this process.
	leafKey *ecdsa.PrivateKey
}

// LoadOrCreate opens the CA kept in dir, creating dir (0700) and the CA on
// first use. Concurrent first uses converge on one CA: each writes a temporary
// file and links it into place; the loser reads the winner's.
func LoadOrCreate(dir string) (*CA, error) {
	if dir == "" {
		return nil, errors.New("netsim ca: empty directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating CA directory: %w", err)
	}
	path := filepath.Join(dir, FileName)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if err := create(dir, path); err != nil {
			return nil, err
		}
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("reading CA: %w", err)
	}
	c, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("CA file %s: %w", path, err)
	}
	// The cert-only copy is a convenience; failing to write it is not fatal
	// to interception, but a read-only home is worth knowing about.
	crt := filepath.Join(dir, CertFileName)
	if old, err := os.ReadFile(crt); err != nil || string(old) != string(c.certPEM) {
		if err := os.WriteFile(crt, c.certPEM, 0o644); err != nil {
			return nil, fmt.Errorf("writing CA certificate: %w", err)
		}
	}
	return c, nil
}

func create(dir, path string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating CA key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("dryexec netsim CA %x", serial.Bytes()[:4]), Organization: []string{"dryexec"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("signing CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	buf := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	buf = append(buf, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})...)
	tmp, err := os.CreateTemp(dir, ".ca-*")
	if err != nil {
		return fmt.Errorf("creating CA: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(buf); err != nil {
		tmp.Close()
		return fmt.Errorf("writing CA: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// Link fails if another process won the race; then its CA is the CA.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("installing CA: %w", err)
	}
	return nil
}

// Parse reads a CA from the content of its file (FileName): what a process
// that is handed the CA, rather than its directory, loads it with.
func Parse(data []byte) (*CA, error) { return parse(data) }

func parse(data []byte) (*CA, error) {
	var certDER, keyDER []byte
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		switch b.Type {
		case "CERTIFICATE":
			certDER = b.Bytes
		case "PRIVATE KEY":
			keyDER = b.Bytes
		}
	}
	if certDER == nil || keyDER == nil {
		return nil, errors.New("missing certificate or key")
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, err
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("key cannot sign")
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &CA{
		cert:    cert,
		key:     signer,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}),
		leaves:  make(map[string]*tls.Certificate),
		leafKey: leafKey,
	}, nil
}

// CertPEM returns the CA certificate in PEM form.
func (c *CA) CertPEM() []byte { return append([]byte(nil), c.certPEM...) }

// Certificate returns the parsed CA certificate.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// Leaf returns a certificate for name (a DNS name or an IP address literal),
// signed by the CA, from the cache when it was signed before.
func (c *CA) Leaf(name string) (*tls.Certificate, error) {
	if name == "" {
		return nil, errors.New("netsim ca: empty host name")
	}
	c.mu.Lock()
	if l, ok := c.leaves[name]; ok {
		c.mu.Unlock()
		return l, nil
	}
	c.mu.Unlock()

	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &c.leafKey.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("signing leaf for %q: %w", name, err)
	}
	leaf := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: c.leafKey}

	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[name]; ok {
		return l, nil
	}
	if len(c.leaves) >= maxLeaves {
		clear(c.leaves)
	}
	c.leaves[name] = leaf
	return leaf, nil
}

// Bundle returns system followed by the CA certificate: a trust store that
// keeps every public root and adds this CA.
func (c *CA) Bundle(system []byte) []byte {
	out := make([]byte, 0, len(system)+len(c.certPEM)+1)
	out = append(out, system...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, c.certPEM...)
}
