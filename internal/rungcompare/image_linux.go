package rungcompare

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/image"
	"github.com/dryexec/dryexec/internal/imagetest"
	"github.com/dryexec/dryexec/session"
)

// AwkwardImage builds an image of the host's tools (those ImageCases run)
// over imagetest.Awkward's layers, pushes it to a registry on loopback and
// returns its reference.
func AwkwardImage(t *testing.T) string {
	t.Helper()
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // anonymous, whatever the host's docker config says
	tools := imagetest.Tools(t, "cat", "rm", "ls", "mv", "mkdir", "chmod", "ln", "cut", "touch")
	img := imagetest.Image(t, imagetest.AwkwardConfig(), append([]v1.Layer{tools}, imagetest.Awkward(t)...)...)
	ref := imagetest.Registry(t) + "/compare/awkward:1"
	imagetest.Push(t, ref, img)
	return ref
}

// ImageCases are the commands of TestImageSameDeltaAsNS, each run in
// AwkwardImage's WorkingDir (/w): what the command sees of the image
// (whiteouts, the opaque dir, symlinks resolved inside the image, the
// device nodes the cache skipped), and changes to each awkward kind of
// entry, every change compared with the image's file before it.
func ImageCases() []Case {
	return []Case{
		{Name: "sees_the_image", Args: []string{"--", "sh", "-c", `pwd; echo "$IMG"; ls -A; echo wh: $(ls -A wh); echo opq: $(ls -A opq);
			echo dev: $(ls -A dev); cat wh/c abs rel; cat dangling 2>/dev/null || echo dangling; test -e /etc/hostname || echo no-host-etc;
			ls -ld suid sgid sticky | cut -c1-10; test -p fifo && echo fifo`},
			// The whited-out b gone, c re-created by a later layer; the opaque
			// dir's lower entry hidden; the device nodes skipped; the absolute
			// symlink resolved in the image; setuid, setgid, sticky kept.
			Stdout: "/w\nawkward\nabs\ndangling\ndata.bin\ndev\nfifo\ngone.txt\nhard\nkeep.txt\nlink-target\nopq\nrel\nsgid\nsticky\nsub\nsuid\nwh\n" +
				"wh: a c\nopq: new\ndev:\nc again\nroot:x:0:0:image root:/root:/bin/sh\nkeep\ndangling\nno-host-etc\n-rwxr-sr-x\ndrwxrwxrwt\n-rwsr-xr-x\nfifo\n"},
		{Name: "files", Args: []string{"--", "sh", "-c", `echo new > new.txt; echo more >> keep.txt; rm gone.txt; printf 'a\000b' > data.bin;
			mkdir -p d/e; mv sub sub2; echo h >> hard; touch -d @1700000000 new.txt; echo t > /tmp/t`},
			SetMtimes: map[string]bool{"new.txt": true}},
		{Name: "whiteouts", Args: []string{"--", "sh", "-c", `echo b-again > wh/b; rm wh/a wh/c; ls -A wh`}},
		{Name: "opaque_dir", Args: []string{"--", "sh", "-c", `echo n2 > opq/n2; rm opq/new; ls -A opq; cat opq/old 2>/dev/null || echo old-hidden`}},
		{Name: "opaque_dir_removed", Args: []string{"--", "sh", "-c", `rm -r opq wh && ls -A`}},
		{Name: "setuid", Args: []string{"--", "sh", "-c", `chmod u-s suid; chmod 2700 sgid; ls -l suid sgid | cut -c1-10`}},
		{Name: "symlinks", Args: []string{"--", "sh", "-c", `rm abs; ln -s /w/keep.txt abs; cat abs; ln -s /etc/passwd abs2; ln -sf keep.txt dangling; cat /w/rel`}},
		{Name: "exit", Args: []string{"--", "sh", "-c", "echo out; echo err >&2; exit 3"}},
	}
}

// ImageSameDeltaAsNS runs each case through `dryexec run --image ref` on ns
// and on name (one DRYEXEC_HOME, so one image cache: the first run pulls)
// and requires the same delta, field by field as SameDeltaAsNS, and the same
// image section (reference, digest, workspace).
func ImageSameDeltaAsNS(t *testing.T, name, ref string, cases []Case) {
	home := t.TempDir()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			args := append([]string{"--image", ref, "--no-store"}, c.Args...)
			nsCode, nsD := CLIRun(t, home, "ns", c.Stdin, args...)
			code, d := CLIRun(t, home, name, c.Stdin, args...)
			if d.Rung != name || nsD.Rung != "ns" {
				t.Fatalf("rungs %q and %q", nsD.Rung, d.Rung)
			}
			if nsCode != code {
				t.Errorf("exit %d on ns, %d on %s", nsCode, code, name)
			}
			if nsD.Image == nil || !reflect.DeepEqual(nsD.Image, d.Image) {
				t.Errorf("image sections: ns %+v, %s %+v", nsD.Image, name, d.Image)
			}
			ns, other := Of(nsD, "/w", c.SetMtimes), Of(d, "/w", c.SetMtimes)
			if c.SizesDiffer {
				ns.IgnoreSizes()
				other.IgnoreSizes()
			}
			if !reflect.DeepEqual(ns, other) {
				t.Errorf("deltas differ:\n%s", DiffFields(ns, other, "ns", name))
			}
			if c.Stdout != "" && nsD.Process.Stdout != c.Stdout {
				t.Errorf("stdout on ns %q (stderr %q), want %q", nsD.Process.Stdout, nsD.Process.Stderr, c.Stdout)
			}
			if c.Name == "files" && len(nsD.Files) == 0 {
				t.Fatalf("the files case changed nothing: %s", nsD.Process.Stderr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(home, "images")); err != nil {
		t.Errorf("the image cache is not in DRYEXEC_HOME: %v", err)
	}
}

// PullImage pulls ref into a fresh cache and returns it as a sandbox's root,
// its layers in use until the test ends.
func PullImage(t *testing.T, ref string) *dryexec.ImageRoot {
	t.Helper()
	c, err := image.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	img, release, _, err := c.Ensure(context.Background(), ref, image.PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return c.Root(ref, img)
}

// ImageSessionCases are sessions on root (AwkwardImage's): the workspace
// pushed over the image, commands changing it and reading the image around
// it.
func ImageSessionCases(root *dryexec.ImageRoot) []SessionCase {
	opt := session.Options{Image: root}
	return []SessionCase{
		{Name: "image_files", Opt: opt, Commands: []string{
			`echo "$IMG"; cat /w/wh/c /w/abs; ls -A /w/opq; echo new > a.txt; echo more >> keep.txt; rm gone.txt; mkdir -p d/e; mv sub sub2`,
			`echo x > /w/outside; cat /w/outside; ln -s /etc/passwd l; cat l; echo again > a.txt`,
		}},
		{Name: "image_state_carries", Opt: opt, Commands: []string{"mkdir -p x/y && cd x/y && export FOO=bar", "pwd; echo $FOO; echo here > f"}},
		{Name: "image_exit", Opt: opt, Commands: []string{"echo out; echo err >&2; exit 3", "no-such-command-dryexec; echo rc=$?"}},
	}
}
