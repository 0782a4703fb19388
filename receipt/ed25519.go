package receipt

import (
	"crypto/ed25519"
	"crypto/sha512"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"sync/atomic"

	"filippo.io/edwards25519"
)

// seedKey signs exactly as crypto/ed25519 does (RFC 8032 Ed25519: the same
// deterministic signature, byte for byte), with a variable-base scalar
// multiplication where crypto/ed25519 uses a fixed-base table. Why: that
// table is built on a process's first key load or signature and costs ≈ 1 ms
// of CPU, while the local engine (`dryexec run` without a daemon) loads the
// key and signs one receipt per process; a variable-base multiplication costs
// ≈ 45 µs. A long-lived signer (the daemon's) switches to crypto/ed25519
// after fastSigns signatures, where the table has paid for itself. Both
// multiplications by a secret scalar (s·B and r·B) are edwards25519's
// ScalarMult, which runs in constant time, as crypto/ed25519's does.
type seedKey struct {
	s      *edwards25519.Scalar // the secret scalar, from the clamped lower half of SHA-512(seed)
	prefix []byte               // the upper half, which makes the nonce
	pub    []byte               // A = s·B, the public key's 32 bytes
}

// fastSigns is how many signatures a Signer makes with its seedKey before it
// hands them to crypto/ed25519: a table-based signature costs ≈ 25 µs less
// here, so the table's ≈ 1 ms is repaid after about 40; below that, a
// process never builds it.
const fastSigns = 32

func newSeedKey(seed []byte) (*seedKey, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, errors.New("an ed25519 seed is 32 bytes")
	}
	h := sha512.Sum512(seed)
	s, err := edwards25519.NewScalar().SetBytesWithClamping(h[:32])
	if err != nil {
		return nil, err
	}
	a := new(edwards25519.Point).ScalarMult(s, edwards25519.NewGeneratorPoint())
	return &seedKey{s: s, prefix: h[32:], pub: a.Bytes()}, nil
}

// sign is RFC 8032's Ed25519 signature of msg: r = H(prefix‖msg),
// R = r·B, k = H(R‖A‖msg), S = r + k·s.
func (k *seedKey) sign(msg []byte) []byte {
	h := sha512.New()
	h.Write(k.prefix)
	h.Write(msg)
	r, err := edwards25519.NewScalar().SetUniformBytes(h.Sum(nil))
	if err != nil {
		panic("receipt: SHA-512 gave other than 64 bytes")
	}
	rb := new(edwards25519.Point).ScalarMult(r, edwards25519.NewGeneratorPoint()).Bytes()
	h.Reset()
	h.Write(rb)
	h.Write(k.pub)
	h.Write(msg)
	c, err := edwards25519.NewScalar().SetUniformBytes(h.Sum(nil))
	if err != nil {
		panic("receipt: SHA-512 gave other than 64 bytes")
	}
	s := edwards25519.NewScalar().MultiplyAdd(c, k.s, r)
	return append(rb, s.Bytes()...)
}

// keySigner signs with seedKey for its first fastSigns signatures, then with
// crypto/ed25519.
type keySigner struct {
	key  *seedKey
	priv ed25519.PrivateKey // as crypto/ed25519 holds it: the seed, then the public key
	n    atomic.Int64
}

func newKeySigner(seed []byte) (*keySigner, error) {
	k, err := newSeedKey(seed)
	if err != nil {
		return nil, err
	}
	priv := append(append(make([]byte, 0, ed25519.PrivateKeySize), seed...), k.pub...)
	return &keySigner{key: k, priv: priv}, nil
}

func (k *keySigner) sign(msg []byte) []byte {
	if k.n.Add(1) <= fastSigns {
		return k.key.sign(msg)
	}
	return ed25519.Sign(k.priv, msg)
}

// oidEd25519 is the algorithm of an Ed25519 PKCS#8 key (RFC 8410).
var oidEd25519 = asn1.ObjectIdentifier{1, 3, 101, 112}

// parseSeed reads an Ed25519 seed from PKCS#8 DER without deriving the
// public key (x509.ParsePKCS8PrivateKey derives it with crypto/ed25519's
// table). Anything else — another algorithm, attributes, trailing data —
// goes to x509, which accepts what it accepts and says why it refuses.
func parseSeed(der []byte) ([]byte, error) {
	var info struct {
		Version int
		Algo    struct {
			Algorithm  asn1.ObjectIdentifier
			Parameters asn1.RawValue `asn1:"optional"`
		}
		PrivateKey []byte
	}
	var seed []byte
	if rest, err := asn1.Unmarshal(der, &info); err == nil && len(rest) == 0 && info.Version == 0 &&
		info.Algo.Algorithm.Equal(oidEd25519) && len(info.Algo.Parameters.FullBytes) == 0 {
		if rest, err := asn1.Unmarshal(info.PrivateKey, &seed); err == nil && len(rest) == 0 && len(seed) == ed25519.SeedSize {
			return seed, nil
		}
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, err
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, errNotEd25519
	}
	return priv.Seed(), nil
}

var errNotEd25519 = errors.New("not an ed25519 key")
