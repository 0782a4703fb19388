package image

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// TestConcurrentPulls: two pulls of the same image at once, each in its own
// Cache value as two processes would have, unpack each layer once between
// them, and both succeed.
func TestConcurrentPulls(t *testing.T) {
	needRoot(t)
	img := mkImage(t, randomLayer(t, 1<<20), randomLayer(t, 1<<20), tarLayer(t, ent{name: "f", body: "x"}))
	// Blobs wait until both pulls have read the manifest: both have then
	// decided the layers are missing before either can unpack one.
	var manifests atomic.Int32
	both := make(chan struct{})
	var once sync.Once
	host := serveRegistry(t, "", "", func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/manifests/") && manifests.Add(1) == 2 {
				once.Do(func() { close(both) })
			}
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				select {
				case <-both:
				case <-r.Context().Done():
					return
				}
			}
			h.ServeHTTP(w, r)
		})
	})
	push(t, host+"/same:v1", img)
	manifests.Store(0)
	dir := t.TempDir()
	var wg sync.WaitGroup
	res := make([]*PullResult, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			c, err := Open(dir, nil)
			if err != nil {
				errs[i] = err
				return
			}
			res[i], errs[i] = c.Pull(context.Background(), host+"/same:v1", PullOptions{})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("pull %d: %v", i, err)
		}
	}
	if n := res[0].Unpacked + res[1].Unpacked; n != 3 {
		t.Errorf("the two pulls unpacked %d + %d layers, want 3 in all", res[0].Unpacked, res[1].Unpacked)
	}
	c, _ := Open(dir, nil)
	if imgs, err := c.List(); err != nil || len(imgs) != 1 || len(imgs[0].Names) != 1 {
		t.Errorf("List = %+v, %v; want one image with one name", imgs, err)
	}
	if l := entries(t, filepath.Join(dir, "tmp")); len(l) != 0 {
		t.Errorf("tmp/ holds %v", l)
	}
}

// TestCancelMidUnpack: a pull cancelled while a layer is being unpacked
// leaves no layer behind, and the next pull does the work.
func TestCancelMidUnpack(t *testing.T) {
	needRoot(t)
	lay := layoutOf(t, mkImage(t, randomLayer(t, 4<<20)))
	c, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, err = c.Pull(ctx, "oci:"+lay, PullOptions{Progress: func(p Progress) {
		if p.Done > 0 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("pull = %v, want context.Canceled", err)
	}
	for _, d := range []string{"layers", "tmp", "images"} {
		if l := entries(t, filepath.Join(c.Dir(), d)); len(l) != 0 {
			t.Errorf("%s/ holds %v after a cancelled pull", d, l)
		}
	}
	res, err := c.Pull(context.Background(), "oci:"+lay, PullOptions{})
	if err != nil || res.Unpacked != 1 {
		t.Fatalf("pull after cancel: %+v, %v", res, err)
	}
}

// TestCrashMidUnpack kills a pulling process with SIGKILL while it unpacks:
// nothing it leaves is taken for a layer, the next Open sweeps its work
// away, and the next pull succeeds.
func TestCrashMidUnpack(t *testing.T) {
	needRoot(t)
	lay := layoutOf(t, mkImage(t, tarLayer(t, ent{name: "small", body: "s"}), randomLayer(t, 4<<20)))
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
	cmd.Env = append(os.Environ(), "DRYEXEC_IMAGE_CRASH_CHILD="+dir+"|oci:"+lay)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The child prints its marker from the progress callback of the big
	// layer, once its bytes flow, and then blocks there.
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "unpacking\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q, %v", line, err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if l := entries(t, filepath.Join(dir, "tmp")); len(l) == 0 {
		t.Fatal("the killed pull left nothing in tmp/: it was not mid-unpack")
	}
	if l := entries(t, filepath.Join(dir, "layers")); len(l) != 1 {
		t.Errorf("layers/ holds %v, want only the small layer finished before the kill", l)
	}
	if l := entries(t, filepath.Join(dir, "images")); len(l) != 0 {
		t.Errorf("an image was recorded by a pull that never finished: %v", l)
	}
	c, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l := entries(t, filepath.Join(dir, "tmp")); len(l) != 0 {
		t.Errorf("Open left %v in tmp/", l)
	}
	res, err := c.Pull(context.Background(), "oci:"+lay, PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Unpacked != 1 {
		t.Errorf("pull after the crash unpacked %d layers, want the 1 the crash interrupted", res.Unpacked)
	}
}

// TestCrashChild is TestCrashMidUnpack's pulling process.
func TestCrashChild(t *testing.T) {
	arg := os.Getenv("DRYEXEC_IMAGE_CRASH_CHILD")
	if arg == "" {
		t.Skip("run by TestCrashMidUnpack")
	}
	dir, ref, _ := strings.Cut(arg, "|")
	c, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	block := make(chan struct{})
	c.Pull(context.Background(), ref, PullOptions{Progress: func(p Progress) {
		if p.Layer == 1 && p.Done > 0 {
			os.Stdout.WriteString("unpacking\n")
			<-block // until SIGKILL
		}
	}})
	t.Fatal("the pull ended before the parent killed it")
}

// layoutOf writes img to a fresh OCI layout directory.
func layoutOf(t testing.TB, img v1.Image) string {
	t.Helper()
	lay := t.TempDir()
	p, err := layout.Write(lay, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return lay
}
