// Package receipt owns dryexec's signed receipts: the sha256 of a StateDelta's
// canonical JSON (Canonical), signed with an ed25519 key generated once per
// install and kept beside the trial store (mode 0600), so that a delta — and
// the decision inside it — can later be shown to be exactly what this install
// produced. docs/decision.md describes the format for verifiers in other
// languages.
package receipt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dryexec/dryexec"
)

// Files of the install's key, in the store directory ($DRYEXEC_HOME).
const (
	KeyFile       = "receipt-key.pem"     // PKCS#8 private key, mode 0600
	PublicKeyFile = "receipt-key.pub.pem" // PKIX public key, to hand to verifiers
)

// SignaturePrefix is prepended to the 32-byte digest to form the signed
// message, so that a receipt signature can never be mistaken for a signature
// over anything else made with the same key.
const SignaturePrefix = "dryexec.receipt/v1\x00"

// Verification failures. Each wraps ErrVerify.
var (
	ErrVerify = errors.New("receipt does not verify")
	// ErrNoReceipt: the delta carries no receipt.
	ErrNoReceipt = fmt.Errorf("%w: the delta has no receipt", ErrVerify)
	// ErrTampered: the delta's content is not what was signed.
	ErrTampered = fmt.Errorf("%w: the delta was changed after it was signed", ErrVerify)
	// ErrWrongKey: signed by another key than the one verifying.
	ErrWrongKey = fmt.Errorf("%w: signed by another key", ErrVerify)
	// ErrBadSignature: the digest matches but the signature does not.
	ErrBadSignature = fmt.Errorf("%w: the signature is not valid", ErrVerify)
	// ErrOtherTrial: a valid receipt, but over another trial's delta (one
	// trial's signed record copied under another id, to replay it).
	ErrOtherTrial = fmt.Errorf("%w: the delta is another trial's", ErrVerify)
)

// Digest returns the lower-case hex sha256 of Canonical(doc).
func Digest(doc []byte) (string, error) {
	c, err := Canonical(doc)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

// KeyID names a public key: "ed25519:" and the first 16 hex digits of the
// sha256 of its 32 raw bytes.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "ed25519:" + hex.EncodeToString(sum[:8])
}

// Signer signs deltas with the install's key.
type Signer struct {
	key  *keySigner
	id   string
	path string // the private key's file
}

// KeyPath is the private key's file: whoever runs a sandbox for this install
// masks it there, since a command that could read it could forge receipts.
func (s *Signer) KeyPath() string { return s.path }

// PublicKey returns the key verifiers need.
func (s *Signer) PublicKey() ed25519.PublicKey {
	return append(ed25519.PublicKey(nil), s.key.key.pub...)
}

// KeyID is the id written into receipts.
func (s *Signer) KeyID() string { return s.id }

// Sign fills d.Receipt for d as it is now (decision included). Change nothing
// in d afterwards: the receipt would no longer verify.
func (s *Signer) Sign(d *dryexec.StateDelta) error {
	d.Receipt = dryexec.Receipt{}
	sum, err := DeltaDigest(d)
	if err != nil {
		return fmt.Errorf("receipt: %w", err)
	}
	sig := s.key.sign(message(sum))
	d.Receipt = dryexec.Receipt{DeltaSHA256: sum, Signature: base64.StdEncoding.EncodeToString(sig), KeyID: s.id}
	return nil
}

// canonFiles is how the canonical form writes an empty Files: top-level
// members are the only ones named "files", and no other member holds an
// array of that name (env, the only map, holds strings).
const canonFiles = `"files":[]`

// DeltaDigest is Digest(json.Marshal(d)) without the whole document in
// memory: the canonical form is hashed as it is made, one FileChange at a
// time (a delta of a million files is hundreds of MB of JSON, twice over).
func DeltaDigest(d *dryexec.StateDelta) (string, error) {
	c := *d
	c.SetFileSource(nil) // the head alone: c.Files is empty
	doc, err := json.Marshal(&c)
	if err != nil {
		return "", fmt.Errorf("encoding the delta: %w", err)
	}
	head, err := Canonical(doc)
	if err != nil {
		return "", err
	}
	i := bytes.Index(head, []byte(canonFiles))
	if i < 0 || bytes.Count(head, []byte(canonFiles)) != 1 {
		return "", fmt.Errorf("%w: no single files member", ErrMalformed)
	}
	h := sha256.New()
	h.Write(head[:i+len(canonFiles)-1])
	k := 0
	if err := d.EachFile(func(f *dryexec.FileChange) error {
		if k > 0 {
			h.Write([]byte{','})
		}
		k++
		b, err := json.Marshal(f)
		if err != nil {
			return fmt.Errorf("encoding the delta: %w", err)
		}
		cb, err := Canonical(b)
		if err != nil {
			return err
		}
		h.Write(cb)
		return nil
	}); err != nil {
		return "", err
	}
	h.Write(head[i+len(canonFiles)-1:])
	return hex.EncodeToString(h.Sum(nil)), nil
}

func message(hexSum string) []byte {
	raw, _ := hex.DecodeString(hexSum)
	return append([]byte(SignaturePrefix), raw...)
}

// Verify checks the receipt inside doc, a StateDelta JSON document, against
// pub, and returns it. Errors wrap ErrVerify (a receipt that does not hold) or
// ErrMalformed (not a delta document).
func Verify(doc []byte, pub ed25519.PublicKey) (dryexec.Receipt, error) {
	sum, err := Digest(doc)
	if err != nil {
		return dryexec.Receipt{}, err
	}
	var top struct {
		Receipt *dryexec.Receipt `json:"receipt"`
	}
	if err := json.Unmarshal(doc, &top); err != nil {
		return dryexec.Receipt{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if top.Receipt == nil || top.Receipt.Signature == "" {
		return dryexec.Receipt{}, ErrNoReceipt
	}
	r := *top.Receipt
	if want := KeyID(pub); r.KeyID != want {
		return r, fmt.Errorf("%w (receipt names %q, the key given is %s)", ErrWrongKey, r.KeyID, want)
	}
	if r.DeltaSHA256 != sum {
		return r, fmt.Errorf("%w (receipt says sha256 %s, the delta hashes to %s)", ErrTampered, r.DeltaSHA256, sum)
	}
	sig, err := base64.StdEncoding.DecodeString(r.Signature)
	if err != nil || !ed25519.Verify(pub, message(sum), sig) {
		return r, ErrBadSignature
	}
	return r, nil
}

// KeyPath is where the install whose home is dir keeps its private key:
// what Signer.KeyPath says once LoadOrCreate(dir) has loaded it, for a
// caller that masks it before (the local engine's prestarted sandbox, the
// daemon's warm pool).
func KeyPath(dir string) string { return filepath.Join(dir, KeyFile) }

// LoadOrCreate returns the signer whose key is in dir, creating the key on
// first use. The private key file must be readable by its owner only.
func LoadOrCreate(dir string) (*Signer, error) {
	path := KeyPath(dir)
	seed, err := loadSeed(path)
	if errors.Is(err, os.ErrNotExist) {
		seed, err = create(dir, path)
	}
	if err != nil {
		return nil, err
	}
	key, err := newKeySigner(seed)
	if err != nil {
		return nil, fmt.Errorf("receipt: %s: %w", path, err)
	}
	pub := ed25519.PublicKey(key.key.pub)
	// A process killed between publishing the key and writing its public half
	// leaves no public file: write it now (verifiers elsewhere need it).
	if _, err := os.Stat(filepath.Join(dir, PublicKeyFile)); errors.Is(err, os.ErrNotExist) {
		if err := writePublic(filepath.Join(dir, PublicKeyFile), pub); err != nil {
			return nil, err
		}
	}
	return &Signer{key: key, id: KeyID(pub), path: path}, nil
}

// loadSeed reads the private key's seed from path.
func loadSeed(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	// Like ssh: a key others can read (or replace) is not this install's secret.
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("receipt: key %s has mode %04o; it must be readable by its owner only (chmod 600)", path, st.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, 16<<10))
	if err != nil {
		return nil, fmt.Errorf("receipt: reading %s: %w", path, err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("receipt: %s is not a PEM private key", path)
	}
	seed, err := parseSeed(blk.Bytes)
	if errors.Is(err, errNotEd25519) {
		return nil, fmt.Errorf("receipt: %s is not an ed25519 key", path)
	}
	if err != nil {
		return nil, fmt.Errorf("receipt: %s: %w", path, err)
	}
	return seed, nil
}

// create generates a key and publishes it with link(2), which fails if another
// process published one first: then that one is used, so that concurrent first
// runs agree on one key.
func create(dir, path string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("receipt: generating a key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".receipt-key-*")
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("receipt: %w", err)
	}
	_, err = tmp.Write(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("receipt: writing the key: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return loadSeed(path)
		}
		return nil, fmt.Errorf("receipt: publishing the key: %w", err)
	}
	if err := writePublic(filepath.Join(dir, PublicKeyFile), pub); err != nil {
		return nil, err
	}
	return priv.Seed(), nil
}

func writePublic(path string, pub ed25519.PublicKey) error {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return fmt.Errorf("receipt: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".receipt-pub-*")
	if err != nil {
		return fmt.Errorf("receipt: writing the public key: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("receipt: writing the public key: %w", err)
	}
	return nil
}

// LoadPublicKey reads a PEM public key (PublicKeyFile's format) or, given a
// private key file, its public half.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("receipt: %s is not a PEM key", path)
	}
	switch blk.Type {
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("receipt: %s: %w", path, err)
		}
		if pub, ok := k.(ed25519.PublicKey); ok {
			return pub, nil
		}
	case "PRIVATE KEY":
		seed, err := loadSeed(path)
		if err != nil {
			return nil, err
		}
		k, err := newSeedKey(seed)
		if err != nil {
			return nil, fmt.Errorf("receipt: %s: %w", path, err)
		}
		return ed25519.PublicKey(k.pub), nil
	}
	return nil, fmt.Errorf("receipt: %s is not an ed25519 key", path)
}
