package cli

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/localrun"
	"github.com/dryexec/dryexec/receipt"
	"github.com/dryexec/dryexec/store"
)

// maxDeltaFile bounds what verify reads: a delta with 100,000 changes and
// full diffs stays far below it.
const maxDeltaFile = 1 << 30

func verifyCmd(env Env) *cobra.Command {
	var keyFile string
	c := &cobra.Command{
		Use:   "verify ID|FILE|-",
		Short: "Check the signed receipt of a stored trial or of a StateDelta JSON file",
		Long: `Check that a delta is exactly what was signed: its canonical JSON hashes to the
receipt's sha256 and the receipt's ed25519 signature holds for the key. By default
the key is this install's ($DRYEXEC_HOME/` + receipt.PublicKeyFile + `); --key names
another install's public key file. Exit 0 when it verifies, 1 when it does not.`,
		Args: usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			home, err := dryexec.DefaultHome(env.Getenv)
			if err != nil {
				return err
			}
			var pub ed25519.PublicKey
			if keyFile != "" {
				pub, err = receipt.LoadPublicKey(keyFile)
			} else {
				pub, err = installKey(home)
			}
			if err != nil {
				return err
			}
			doc, name, err := readDelta(env, args[0])
			if err != nil {
				return err
			}
			doc, err = withoutStatus(doc)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			r, err := receipt.Verify(doc, pub)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			fmt.Fprintf(env.Stdout, "%s: receipt verifies (key %s, sha256 %s)\n", name, r.KeyID, r.DeltaSHA256)
			return nil
		},
	}
	c.Flags().StringVar(&keyFile, "key", "", "verify with this public key file (PEM) instead of this install's key")
	return c
}

// installKey is this install's public key: the public file, else the public
// half of the private key. Verifying never creates a key.
func installKey(home string) (ed25519.PublicKey, error) {
	for _, f := range []string{receipt.PublicKeyFile, receipt.KeyFile} {
		p := filepath.Join(home, f)
		if _, err := os.Stat(p); err == nil {
			return receipt.LoadPublicKey(p)
		}
	}
	return nil, fmt.Errorf("%w: this install has no receipt key yet (%s); name one with --key", receipt.ErrVerify, home)
}

// readDelta reads the delta named by arg: a stored trial's id, "-" for
// standard input, or a file.
func readDelta(env Env, arg string) ([]byte, string, error) {
	var r io.Reader
	name := arg
	switch {
	case arg == "-":
		r, name = env.Stdin, "standard input"
	case store.ValidID(arg):
		s, err := localrun.StartStore(env)
		if err != nil {
			return nil, "", err
		}
		p, err := s.DeltaFile(arg)
		if err != nil {
			return nil, "", err
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, "", err
		}
		defer f.Close()
		r = f
	default:
		f, err := os.Open(arg)
		if err != nil {
			return nil, "", usageError{err}
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			return nil, "", usageError{fmt.Errorf("%s is a directory: give a trial id, a delta file or - (standard input)", arg)}
		}
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxDeltaFile+1))
	if err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", name, err)
	}
	if len(b) > maxDeltaFile {
		return nil, "", fmt.Errorf("%w: %s is larger than %d bytes", receipt.ErrMalformed, name, maxDeltaFile)
	}
	return b, name, nil
}

// withoutStatus removes the top-level "status" member that `dryexec show
// --json` adds to a delta (the trial's state, never signed), so that what
// show printed verifies as what was stored. Any other member counts.
func withoutStatus(doc []byte) ([]byte, error) {
	if !bytes.Contains(doc, []byte(`"status"`)) {
		return doc, nil
	}
	// A document the canonical form refuses (a duplicate member, which a
	// map would quietly drop) is left for receipt.Verify to refuse.
	if _, err := receipt.Canonical(doc); err != nil {
		return doc, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(doc, &m); err != nil {
		return doc, nil // receipt.Verify says what is wrong with it
	}
	if _, ok := m["status"]; !ok {
		return doc, nil
	}
	delete(m, "status")
	return json.Marshal(m)
}
