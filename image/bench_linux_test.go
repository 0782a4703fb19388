package image

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BenchmarkUnpack measures a pull of one layer of random files from an OCI
// layout (fetch from disk, gunzip, both digests, unpack) against `tar -xzf`
// of the same compressed layer, in the same run. Bytes are the uncompressed
// layer's.
func BenchmarkUnpack(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("unpacking images needs root")
	}
	l := randomLayer(b, 64<<20)
	lay := layoutOf(b, mkImage(b, l))
	rc, _ := l.Uncompressed()
	n, _ := io.Copy(io.Discard, rc)
	rc.Close()
	zfile := filepath.Join(b.TempDir(), "layer.tgz")
	zr, _ := l.Compressed()
	f, _ := os.Create(zfile)
	io.Copy(f, zr)
	f.Close()
	b.Run("dryexec", func(b *testing.B) {
		b.SetBytes(n)
		for b.Loop() {
			c, err := Open(b.TempDir(), nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Pull(context.Background(), "oci:"+lay, PullOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tar-x", func(b *testing.B) {
		b.SetBytes(n)
		for b.Loop() {
			d := b.TempDir()
			if out, err := exec.Command("tar", "-xzf", zfile, "-C", d).CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	})
}
