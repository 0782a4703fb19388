package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestPullSources pulls one image from each kind of source and finds its
// files in the cache's layer directories.
func TestPullSources(t *testing.T) {
	needRoot(t)
	img := mkImage(t,
		tarLayer(t, ent{name: "etc/", typ: '5'}, ent{name: "etc/os-release", body: "ID=test\n"}),
		tarLayer(t, ent{name: "app/run.sh", body: "#!/bin/sh\necho hi\n", mode: 0o755}))
	dg := digestOf(t, img)
	host := serveRegistry(t, "", "", nil)
	push(t, host+"/team/app:v1", img)

	lay := t.TempDir()
	p, err := layout.Write(lay, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "v1"})); err != nil {
		t.Fatal(err)
	}
	ociTar := filepath.Join(t.TempDir(), "app.oci.tar")
	tarDir(t, lay, ociTar)
	dockerTar := filepath.Join(t.TempDir(), "app.docker.tar")
	tag, _ := name.NewTag("team/app:v1")
	if err := tarball.WriteToFile(dockerTar, tag, img); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ name, ref string }{
		{"registry tag", host + "/team/app:v1"},
		{"registry digest", host + "/team/app@" + dg},
		{"oci layout", "oci:" + lay},
		{"oci layout tag", "oci:" + lay + ":v1"},
		{"oci layout digest", "oci:" + lay + "@" + dg},
		{"oci archive", "oci-archive:" + ociTar + ":v1"},
		{"docker archive", "docker-archive:" + dockerTar},
		{"docker archive tag", "docker-archive:" + dockerTar + ":team/app:v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Open(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Pull(context.Background(), tc.ref, PullOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// A docker archive stores the config and manifest its own way,
			// so only the layers are the same content there.
			if tc.name[:6] != "docker" && res.Digest != dg {
				t.Errorf("digest %s, want %s", res.Digest, dg)
			}
			if want := DefaultPlatform().String(); res.Platform != want {
				t.Errorf("platform %s, want %s (the config's)", res.Platform, want)
			}
			if res.Unpacked != 2 || len(res.Layers) != 2 {
				t.Errorf("unpacked %d of %d layers, want 2 of 2", res.Unpacked, len(res.Layers))
			}
			dirs := c.LayerDirs(res.Image)
			if b, err := os.ReadFile(filepath.Join(dirs[0], "etc/os-release")); err != nil || string(b) != "ID=test\n" {
				t.Errorf("etc/os-release: %q, %v", b, err)
			}
			if st, err := os.Stat(filepath.Join(dirs[1], "app/run.sh")); err != nil || st.Mode().Perm() != 0o755 {
				t.Errorf("app/run.sh: %v, %v", st, err)
			}
			got, err := c.Lookup(tc.ref)
			if err != nil || got.Digest != res.Digest {
				t.Errorf("Lookup(%s) = %v, %v", tc.ref, got.Digest, err)
			}
			if left := entries(t, filepath.Join(c.Dir(), "tmp")); len(left) != 0 {
				t.Errorf("tmp/ holds %v after the pull", left)
			}
			// Pulled again: nothing to unpack.
			again, err := c.Pull(context.Background(), tc.ref, PullOptions{})
			if err != nil || again.Unpacked != 0 {
				t.Errorf("second pull unpacked %d layers (%v), want 0", again.Unpacked, err)
			}
		})
	}
}

// TestPullErrors: each failure is its own typed error.
func TestPullErrors(t *testing.T) {
	needRoot(t)
	img := mkImage(t, tarLayer(t, ent{name: "f", body: "x"}))
	host := serveRegistry(t, "", "", nil)
	push(t, host+"/a/b:v1", img)
	authHost := serveRegistry(t, "alice", "s3cret", nil)
	push(t, authHost+"/private/img:v1", img, remote.WithAuth(&authn.Basic{Username: "alice", Password: "s3cret"}))

	// An index with only s390x.
	other := mkImage(t, tarLayer(t, ent{name: "g", body: "y"}))
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: other,
		Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "s390x"}}})
	r, _ := name.ParseReference(host + "/multi:v1")
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatal(err)
	}
	// A single image built for another architecture.
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.Architecture = "s390x"
	foreign, _ := mutate.ConfigFile(img, cf)
	push(t, host+"/foreign:v1", foreign)
	// A layer of a media type no unpacker knows.
	weird, err := mutate.Append(empty.Image, mutate.Addendum{Layer: tarLayer(t, ent{name: "w", body: "w"}), MediaType: "application/x-not-a-layer"})
	if err != nil {
		t.Fatal(err)
	}
	push(t, host+"/weird:v1", weird)
	// A layout whose layer blob was swapped for another valid layer.
	lay := t.TempDir()
	p, _ := layout.Write(lay, empty.Index)
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	ls, _ := img.Layers()
	ld, _ := ls[0].Digest()
	swap := tarLayer(t, ent{name: "f", body: "evil"})
	rc, _ := swap.Compressed()
	if err := os.Remove(filepath.Join(lay, "blobs", "sha256", ld.Hex)); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteBlob(ld, rc); err != nil {
		t.Fatal(err)
	}

	noCreds := t.TempDir()
	for _, tc := range []struct {
		name, ref string
		creds     [2]string // docker config user/pass for authHost
		want      error
		status    int // RegistryError.Status, when the registry answered
	}{
		{"missing tag", host + "/a/b:nope", [2]string{}, ErrNotFound, 404},
		{"missing repo", host + "/no/such:v1", [2]string{}, ErrNotFound, 404},
		{"unknown digest", host + "/a/b@sha256:" + zeros, [2]string{}, ErrNotFound, 404},
		{"malformed digest", host + "/a/b@sha256:abc", [2]string{}, ErrBadDigest, 0},
		{"swapped layer blob", "oci:" + lay, [2]string{}, ErrBadDigest, 0},
		{"unsupported layer", host + "/weird:v1", [2]string{}, ErrUnsupportedMediaType, 0},
		{"no credentials", authHost + "/private/img:v1", [2]string{}, ErrUnauthorized, 401},
		{"wrong credentials", authHost + "/private/img:v1", [2]string{"alice", "guess"}, ErrUnauthorized, 401},
		{"platform not in index", host + "/multi:v1", [2]string{}, ErrPlatformNotFound, 0},
		{"image for another arch", host + "/foreign:v1", [2]string{}, ErrPlatformNotFound, 0},
		{"missing layout", "oci:" + filepath.Join(noCreds, "none"), [2]string{}, ErrNotFound, 0},
		{"missing archive", "docker-archive:" + filepath.Join(noCreds, "none.tar"), [2]string{}, ErrNotFound, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.creds[0] != "" {
				dockerConfig(t, authHost, tc.creds[0], tc.creds[1])
			} else {
				t.Setenv("DOCKER_CONFIG", noCreds)
			}
			c, err := Open(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Pull(context.Background(), tc.ref, PullOptions{})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Pull(%s) = %v, want %v", tc.ref, err, tc.want)
			}
			var re *RegistryError
			if tc.status != 0 && (!errors.As(err, &re) || re.Status != tc.status) {
				t.Errorf("want a RegistryError with status %d, got %v", tc.status, err)
			}
			var pe *PlatformError
			if tc.want == ErrPlatformNotFound && (!errors.As(err, &pe) || !slices.Contains(pe.Available, "linux/s390x")) {
				t.Errorf("want a PlatformError offering linux/s390x, got %v", err)
			}
			if n := len(entries(t, filepath.Join(c.Dir(), "layers"))); n != 0 && tc.want != ErrPlatformNotFound {
				t.Errorf("%d layers kept after a failed pull", n)
			}
			if left := entries(t, filepath.Join(c.Dir(), "tmp")); len(left) != 0 {
				t.Errorf("tmp/ holds %v after a failed pull", left)
			}
		})
	}
}

const zeros = "0000000000000000000000000000000000000000000000000000000000000000"

// TestPullWithCredentials reads the registry's credentials from a docker
// config, as docker login writes it.
func TestPullWithCredentials(t *testing.T) {
	needRoot(t)
	img := mkImage(t, tarLayer(t, ent{name: "secret.txt", body: "only for alice"}))
	host := serveRegistry(t, "alice", "s3cret", nil)
	push(t, host+"/private/img:v1", img, remote.WithAuth(&authn.Basic{Username: "alice", Password: "s3cret"}))
	dockerConfig(t, host, "alice", "s3cret")
	c, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Pull(context.Background(), host+"/private/img:v1", PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(c.LayerDirs(res.Image)[0], "secret.txt")); err != nil || string(b) != "only for alice" {
		t.Errorf("secret.txt: %q, %v", b, err)
	}
}
