package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestRemoveAndPrune: two images share a base layer; removing one keeps the
// shared layer and drops its own; prune removes orphans and leftovers.
func TestRemoveAndPrune(t *testing.T) {
	needRoot(t)
	base := tarLayer(t, ent{name: "base", body: "shared"})
	a := mkImage(t, base, tarLayer(t, ent{name: "a", body: "a"}))
	b := mkImage(t, base, tarLayer(t, ent{name: "b", body: "b"}))
	host := serveRegistry(t, "", "", nil)
	push(t, host+"/a:v1", a)
	push(t, host+"/b:v1", b)
	c, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ra, err := c.Pull(ctx, host+"/a:v1", PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := c.Pull(ctx, host+"/b:v1", PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rb.Unpacked != 1 {
		t.Errorf("b unpacked %d layers, want 1: the base is shared", rb.Unpacked)
	}
	// A second name for a: removing it keeps the image.
	if _, err := c.Pull(ctx, "oci:"+layoutOf(t, a), PullOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Lookup(host + "/a:v1"); len(got.Names) != 2 {
		t.Fatalf("a has names %v, want 2", got.Names)
	}
	if _, err := c.Remove(ctx, host+"/a:v1"); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Lookup(ra.Digest); err != nil || len(got.Names) != 1 {
		t.Fatalf("after removing one name: %+v, %v", got, err)
	}
	if _, err := c.Remove(ctx, ra.Digest); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup(ra.Digest); !errors.Is(err, ErrNotFound) {
		t.Errorf("a still found: %v", err)
	}
	layers := entries(t, filepath.Join(c.Dir(), "layers"))
	want := []string{filepath.Base(c.layerDir(rb.Layers[0])), filepath.Base(c.layerDir(rb.Layers[1]))}
	slices.Sort(want)
	if !slices.Equal(layers, want) {
		t.Errorf("layers after rm: %v, want b's %v", layers, want)
	}
	if _, err := c.Remove(ctx, "nope:v9"); !errors.Is(err, ErrNotFound) {
		t.Errorf("rm of an unknown image: %v", err)
	}
	// An orphan layer and a crashed pull's leftover.
	os.Mkdir(filepath.Join(c.Dir(), "layers", "deadbeef"), 0o755)
	os.WriteFile(filepath.Join(c.Dir(), "layers", "deadbeef", "f"), []byte("1234"), 0o644)
	os.Mkdir(filepath.Join(c.Dir(), "tmp", "layer-123"), 0o755)
	rep, err := c.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep != (PruneReport{Layers: 1, Bytes: 4, Tmp: 1}) {
		t.Errorf("prune: %+v", rep)
	}
	if got := entries(t, filepath.Join(c.Dir(), "layers")); !slices.Equal(got, want) {
		t.Errorf("layers after prune: %v", got)
	}
}

// TestUseHoldsLayers: while an image is in use, rm and prune cannot take the
// lock they need; after release they can.
func TestUseHoldsLayers(t *testing.T) {
	needRoot(t)
	c, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lay := layoutOf(t, mkImage(t, tarLayer(t, ent{name: "f", body: "x"})))
	if _, err := c.Pull(context.Background(), "oci:"+lay, PullOptions{}); err != nil {
		t.Fatal(err)
	}
	img, release, err := c.Use(context.Background(), "oci:"+lay)
	if err != nil || len(img.Layers) != 1 {
		t.Fatalf("Use = %+v, %v", img, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Prune(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("prune while in use = %v, want it to wait (and give up on its cancelled context)", err)
	}
	release()
	if _, err := c.Remove(context.Background(), "oci:"+lay); err != nil {
		t.Errorf("rm after release: %v", err)
	}
	if _, _, err := c.Use(context.Background(), "oci:"+lay); !errors.Is(err, ErrNotFound) {
		t.Errorf("Use after rm = %v, want ErrNotFound", err)
	}
}
