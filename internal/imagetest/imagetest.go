// Package imagetest builds real OCI images for tests and benchmarks: layers
// from tar entries, a layer of the host's own programs with the shared
// libraries they load (a small working userland without a base image or a
// network), images with a config, and go-containerregistry's registry served
// on loopback to push them to.
package imagetest

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Entry is one tar entry of a layer. A zero Type is a regular file; a
// Name ".wh.X" is an OCI whiteout of X.
type Entry struct {
	Name string
	Type byte
	Body []byte
	Link string
	Mode int64
	// Major and Minor are a device node's numbers.
	Major, Minor int64
}

// Layer builds a gzip layer from entries, as written.
func Layer(tb testing.TB, ents ...Entry) v1.Layer {
	tb.Helper()
	l, err := NewLayer(ents...)
	return must(tb, l, err)
}

func must[T any](tb testing.TB, v T, err error) T {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// NewLayer is Layer for a program that is not a test (the benchmarks).
func NewLayer(ents ...Entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.Name, Typeflag: e.Type, Linkname: e.Link, Mode: e.Mode, Devmajor: e.Major, Devminor: e.Minor,
			ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(e.Body)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}

// Tools is a layer holding the host's programs progs (names looked up in
// PATH, placed at /bin/NAME) and every shared library and loader they load,
// at the paths ldd gives: enough to run them in an image with nothing else.
// sh is always included.
func Tools(tb testing.TB, progs ...string) v1.Layer {
	tb.Helper()
	for _, p := range append([]string{"sh"}, progs...) {
		if _, err := exec.LookPath(p); err != nil {
			tb.Skipf("no %s on this host: %v", p, err)
		}
	}
	l, err := NewTools(progs...)
	return must(tb, l, err)
}

// NewTools is Tools for a program that is not a test.
func NewTools(progs ...string) (v1.Layer, error) {
	files := map[string]string{} // image path → host path
	for _, p := range append([]string{"sh"}, progs...) {
		hp, err := exec.LookPath(p)
		if err != nil {
			return nil, err
		}
		files["/bin/"+p] = hp
		out, _ := exec.Command("ldd", hp).Output()
		for _, line := range strings.Split(string(out), "\n") {
			// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or
			// "/lib64/ld-linux-x86-64.so.2 (0x…)".
			f := strings.Fields(line)
			for _, w := range f {
				if strings.HasPrefix(w, "/") {
					files[w] = w
					break
				}
			}
		}
	}
	dirs := map[string]bool{}
	var ents []Entry
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for d := path.Dir(n); d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	ds := make([]string, 0, len(dirs))
	for d := range dirs {
		ds = append(ds, d)
	}
	slices.SortFunc(ds, func(a, b string) int { return strings.Count(a, "/") - strings.Count(b, "/") })
	for _, d := range ds {
		ents = append(ents, Entry{Name: d[1:] + "/", Type: tar.TypeDir})
	}
	for _, n := range names {
		b, err := os.ReadFile(files[n])
		if err != nil {
			return nil, err
		}
		ents = append(ents, Entry{Name: n[1:], Body: b, Mode: 0o755})
	}
	return NewLayer(ents...)
}

// Awkward are layers, over Tools' (which the caller adds), with every case a
// layer can make awkward for a sandbox on it, laid out for a command to
// read, change and delete: in the lower layer /w (the image's WorkingDir in
// AwkwardConfig) with files, a dir to rename and a hardlink pair, /w/wh
// whose entries the upper layer whites out (one of them re-created there),
// /w/opq which the upper layer makes opaque, setuid and setgid programs,
// symlinks (absolute, relative, dangling), device nodes (which the image
// cache skips), a FIFO; in the upper the whiteouts, the opaque marker and
// what they bring.
func Awkward(tb testing.TB) []v1.Layer {
	tb.Helper()
	lower := []Entry{
		{Name: "w/", Type: tar.TypeDir},
		{Name: "w/keep.txt", Body: []byte("keep\n")},
		{Name: "w/gone.txt", Body: []byte("gone\n")},
		{Name: "w/data.bin", Body: []byte("x\x00y")},
		{Name: "w/link-target", Body: []byte("shared\n")},
		{Name: "w/hard", Type: tar.TypeLink, Link: "w/link-target"},
		{Name: "w/sub/", Type: tar.TypeDir},
		{Name: "w/sub/x", Body: []byte("x\n")},
		{Name: "w/wh/", Type: tar.TypeDir},
		{Name: "w/wh/a", Body: []byte("a\n")},
		{Name: "w/wh/b", Body: []byte("b, whited out\n")},
		{Name: "w/wh/c", Body: []byte("c, whited out then re-created\n")},
		{Name: "w/opq/", Type: tar.TypeDir},
		{Name: "w/opq/old", Body: []byte("hidden by the opaque dir\n")},
		{Name: "w/suid", Body: []byte("#!/bin/sh\necho suid\n"), Mode: 0o4755},
		{Name: "w/sgid", Body: []byte("#!/bin/sh\necho sgid\n"), Mode: 0o2755},
		{Name: "w/sticky/", Type: tar.TypeDir, Mode: 0o1777},
		{Name: "etc/", Type: tar.TypeDir},
		{Name: "etc/passwd", Body: []byte("root:x:0:0:image root:/root:/bin/sh\n")},
		{Name: "w/abs", Type: tar.TypeSymlink, Link: "/etc/passwd"},
		{Name: "w/rel", Type: tar.TypeSymlink, Link: "keep.txt"},
		{Name: "w/dangling", Type: tar.TypeSymlink, Link: "/nowhere/at/all"},
		{Name: "w/dev/", Type: tar.TypeDir},
		{Name: "w/dev/null", Type: tar.TypeChar, Major: 1, Minor: 3},
		{Name: "w/dev/sda", Type: tar.TypeBlock, Major: 8},
		{Name: "w/fifo", Type: tar.TypeFifo},
		{Name: "tmp/", Type: tar.TypeDir, Mode: 0o1777},
	}
	upper := []Entry{
		{Name: "w/wh/.wh.b"},
		{Name: "w/wh/.wh.c"},
		{Name: "w/opq/.wh..wh..opq"},
		{Name: "w/opq/new", Body: []byte("the opaque dir's own\n")},
	}
	top := []Entry{
		{Name: "w/wh/c", Body: []byte("c again\n")},
	}
	return []v1.Layer{Layer(tb, lower...), Layer(tb, upper...), Layer(tb, top...)}
}

// AwkwardConfig is the config of an image on Awkward's layers.
func AwkwardConfig() Config {
	return Config{Env: []string{"PATH=/bin", "IMG=awkward"}, WorkingDir: "/w"}
}

// Config is what Image puts in the image's config.
type Config struct {
	Env        []string
	WorkingDir string
}

// Image stacks layers on an empty image for linux/GOARCH with cfg.
func Image(tb testing.TB, cfg Config, layers ...v1.Layer) v1.Image {
	tb.Helper()
	img, err := NewImage(cfg, layers...)
	return must(tb, img, err)
}

// NewImage is Image for a program that is not a test.
func NewImage(cfg Config, layers ...v1.Layer) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Env, cf.Config.WorkingDir = cfg.Env, cfg.WorkingDir
	return mutate.ConfigFile(img, cf)
}

// Registry serves go-containerregistry's registry (a real OCI distribution
// server) on loopback for the test's life and returns its host:port.
func Registry(tb testing.TB) string {
	tb.Helper()
	host, stop := NewRegistry()
	tb.Cleanup(stop)
	return host
}

// NewRegistry is Registry for a program that is not a test: stop ends it.
func NewRegistry() (host string, stop func()) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	return strings.TrimPrefix(srv.URL, "http://"), srv.Close
}

// Push writes img to ref in a registry.
func Push(tb testing.TB, ref string, img v1.Image) {
	tb.Helper()
	if err := NewPush(ref, img); err != nil {
		tb.Fatal(err)
	}
}

// NewPush is Push for a program that is not a test.
func NewPush(ref string, img v1.Image) error {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return err
	}
	return remote.Write(r, img)
}

// Layout writes img as an OCI layout directory in dir and returns the
// reference that names it ("oci:DIR").
func Layout(tb testing.TB, dir string, img v1.Image) string {
	tb.Helper()
	ref, err := NewLayout(dir, img)
	return must(tb, ref, err)
}

// NewLayout is Layout for a program that is not a test.
func NewLayout(dir string, img v1.Image) (string, error) {
	p, err := layout.Write(filepath.Join(dir), empty.Index)
	if err != nil {
		return "", err
	}
	if err := p.AppendImage(img); err != nil {
		return "", err
	}
	return "oci:" + dir, nil
}
