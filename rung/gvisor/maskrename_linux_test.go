package gvisor

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// blobSink keeps every blob, to look for what must not be there.
type blobSink struct{ blobs [][]byte }

func (s *blobSink) PutBlob(r io.Reader) (string, int64, error) {
	var b bytes.Buffer
	n, err := b.ReadFrom(r)
	s.blobs = append(s.blobs, b.Bytes())
	return "", n, err
}

// TestRenamedDirHoldingMaskLeaksNothing: as on ns, a dir that holds a mask
// or dryexec's own state, renamed with rename(2), never brings the host's
// masked contents into the delta, and the delta says it is incomplete.
func TestRenamedDirHoldingMaskLeaksNothing(t *testing.T) {
	requireGVisor(t)
	const secret = "SECRET-KEY-MATERIAL-0123456789"
	for _, own := range []bool{false, true} {
		dir := t.TempDir()
		for p, c := range map[string]string{"proj/keys/id": secret, "proj/src/main.c": "int main;\n"} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		sink := &blobSink{}
		spec := dryexec.TrialSpec{Blobs: sink, NoDefaultMasks: true, Masks: []string{filepath.Join(dir, "proj/keys")}}
		if own {
			spec.Masks, spec.OwnPaths = nil, []string{filepath.Join(dir, "proj/keys")}
		}
		d := runTrial(t, nil, dir, spec, "/usr/bin/python3", "-c", `import os
try:
    os.rename("proj", "proj2")
    print("renamed")
except OSError as e:
    print("refused", e.errno)`)
		b, _ := json.Marshal(d)
		if strings.Contains(string(b), secret) {
			t.Fatalf("own state %v: the delta holds the masked content:\n%s", own, b)
		}
		for _, blob := range sink.blobs {
			if bytes.Contains(blob, []byte(secret)) {
				t.Fatalf("own state %v: a blob holds the masked content", own)
			}
		}
		if strings.HasPrefix(d.Process.Stdout, "renamed") && !d.Incomplete {
			t.Errorf("own state %v: renamed around the mask, yet the delta claims to be complete: %s", own, b)
		}
		if _, err := os.Stat(filepath.Join(dir, "proj/keys/id")); err != nil {
			t.Fatalf("the host lost its file: %v", err)
		}
	}
}
