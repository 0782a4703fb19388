package image

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// BenchmarkUnpack measures a pull of one layer from an OCI layout (read from
// disk, gunzip, both digests, unpack) against `tar -xzf` of the same
// compressed layer, in the same run, for one big random file and for many
// small files. Bytes are the uncompressed layer's.
func BenchmarkUnpack(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("unpacking images needs root")
	}
	small := func() v1.Layer {
		var ents []ent
		for d := range 50 {
			ents = append(ents, ent{name: fmt.Sprintf("d%d/", d), typ: '5'})
			for f := range 100 {
				ents = append(ents, ent{name: fmt.Sprintf("d%d/f%d", d, f), body: strings.Repeat(fmt.Sprint(f), 2000)})
			}
		}
		return tarLayer(b, ents...)
	}
	for _, tc := range []struct {
		name  string
		layer v1.Layer
	}{
		{"one-64MiB-file", randomLayer(b, 64<<20)},
		{"5000-small-files", small()},
	} {
		lay := layoutOf(b, mkImage(b, tc.layer))
		rc, _ := tc.layer.Uncompressed()
		n, _ := io.Copy(io.Discard, rc)
		rc.Close()
		zfile := filepath.Join(b.TempDir(), "layer.tgz")
		zr, _ := tc.layer.Compressed()
		f, _ := os.Create(zfile)
		io.Copy(f, zr)
		f.Close()
		b.Run(tc.name+"/dryexec", func(b *testing.B) {
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
		b.Run(tc.name+"/tar-x", func(b *testing.B) {
			b.SetBytes(n)
			for b.Loop() {
				if out, err := exec.Command("tar", "-xzf", zfile, "-C", b.TempDir()).CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
			}
		})
	}
}
