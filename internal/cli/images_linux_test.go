package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/internal/imagetest"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"golang.org/x/sys/unix"
)

// imageRegistry serves a registry on loopback holding one random image at
// REPO:v1 and returns its reference.
func imageRegistry(t *testing.T) string {
	t.Helper()
	img, err := random.Image(256<<10, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref := imagetest.Registry(t) + "/team/tool:v1"
	imagetest.Push(t, ref, img)
	return ref
}

func TestImagesCommands(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("unpacking images needs root")
	}
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	ref := imageRegistry(t)
	home := t.TempDir()
	host := ref[:strings.Index(ref, "/")]
	for _, step := range []struct {
		args       []string
		code       int
		out, noErr string
	}{
		{[]string{"images", "pull", ref}, 0, "2 unpacked now", "\r"},
		{[]string{"images", "pull", ref}, 0, "0 unpacked now", "\r"},
		{[]string{"images", "ls"}, 0, ref, ""},
		{[]string{"images", "pull", host + "/team/none:v1"}, ExitRefused, "", ""},
		{[]string{"images", "pull", "oci:"}, ExitUsage, "", ""},
		{[]string{"images", "rm", ref}, 0, "removed " + ref, ""},
		{[]string{"images", "rm", ref}, ExitRefused, "", ""},
		{[]string{"images", "prune"}, 0, "removed 0 layers", ""},
	} {
		code, out, errs := cli(t, home, step.args...)
		if code != step.code || !strings.Contains(out, step.out) || (step.noErr != "" && strings.Contains(errs, step.noErr)) {
			t.Errorf("%v: exit %d (want %d)\nstdout: %s\nstderr: %q", step.args, code, step.code, out, errs)
		}
	}
	code, out, _ := cli(t, home, "images", "ls", "--json")
	var imgs []json.RawMessage
	if code != 0 || json.Unmarshal([]byte(out), &imgs) != nil || len(imgs) != 0 {
		t.Errorf("ls --json after rm: %d %s", code, out)
	}
}

// TestImagesPullProgressOnTTY: on a terminal the pull draws a bar, and
// clears it.
func TestImagesPullProgressOnTTY(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("unpacking images needs root")
	}
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	ref := imageRegistry(t)
	ptm, pts := openPTY(t)
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(ptm) // EIO once the slave side closes
		got <- string(b)
	}()
	env := map[string]string{"DRYEXEC_HOME": t.TempDir()}
	var out bytes.Buffer
	code := Run(context.Background(), []string{"images", "pull", ref}, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: pts,
		Getenv: func(k string) string { return env[k] }})
	pts.Close()
	tty := <-got
	if code != 0 {
		t.Fatalf("exit %d: %s", code, tty)
	}
	if !strings.Contains(tty, "layer 2/2 [") || !strings.HasSuffix(tty, "\r\x1b[K") {
		t.Errorf("terminal saw %q, want a bar then a cleared line", tty)
	}
}

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		testreq.Needf(t, testreq.Kernel, "pseudo-terminal", err)
	}
	t.Cleanup(func() { ptm.Close() })
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Raw output: the bar's bytes arrive as written (no \n → \r\n).
	tio, err := unix.IoctlGetTermios(int(pts.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(int(pts.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	return ptm, pts
}
