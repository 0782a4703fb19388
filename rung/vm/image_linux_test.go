package vm

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestModuleOrder(t *testing.T) {
	dir := t.TempDir()
	dep := "kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/netfs/netfs.ko\n" +
		"kernel/net/9p/9pnet.ko:\n" +
		"kernel/fs/netfs/netfs.ko:\n" +
		"kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio_ring.ko\n" +
		"kernel/drivers/virtio/virtio_ring.ko:\n"
	os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644)
	for _, c := range []struct {
		want []string
		got  []string
	}{
		{[]string{"9p"}, []string{"kernel/net/9p/9pnet.ko", "kernel/fs/netfs/netfs.ko", "kernel/fs/9p/9p.ko"}},
		{[]string{"9pnet_virtio", "9p"}, []string{"kernel/net/9p/9pnet.ko", "kernel/drivers/virtio/virtio_ring.ko",
			"kernel/net/9p/9pnet_virtio.ko", "kernel/fs/netfs/netfs.ko", "kernel/fs/9p/9p.ko"}},
		// Built in: not in modules.dep, nothing to load.
		{[]string{"virtio_console"}, nil},
	} {
		got, err := moduleOrder(dir, c.want)
		if err != nil || !slices.Equal(got, c.got) {
			t.Errorf("moduleOrder(%v) = %v, %v; want %v", c.want, got, err, c.got)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	names := []string{"/boot/vmlinuz-6.10.0-1-amd64", "/boot/vmlinuz-6.1.0-57-amd64", "/boot/vmlinuz-6.1.0-9-amd64"}
	slices.SortFunc(names, compareVersions)
	want := []string{"/boot/vmlinuz-6.1.0-9-amd64", "/boot/vmlinuz-6.1.0-57-amd64", "/boot/vmlinuz-6.10.0-1-amd64"}
	if !slices.Equal(names, want) {
		t.Errorf("got %v, want %v", names, want)
	}
}

// TestCPIOLayout: each entry's header, name and data start at a multiple
// of four, as the kernel's unpacker requires, and the archive ends with
// the trailer.
func TestCPIOLayout(t *testing.T) {
	var buf bytes.Buffer
	c := &cpioWriter{w: &buf}
	c.dir("dev")
	c.charDev("dev/console", 0o600, 5, 1)
	c.file("init", 0o755, 5, bytes.NewReader([]byte("hello")))
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	var names []string
	for off := 0; off < len(b); {
		if string(b[off:off+6]) != "070701" {
			t.Fatalf("no newc magic at %d", off)
		}
		field := func(i int) int {
			var v int
			for _, ch := range b[off+6+8*i : off+6+8*i+8] {
				v = v*16 + int(bytes.IndexByte([]byte("0123456789abcdef"), ch))
			}
			return v
		}
		size, nameLen := field(6), field(11)
		name := string(b[off+110 : off+110+nameLen-1])
		names = append(names, name)
		data := (off + 110 + nameLen + 3) &^ 3
		if name == "init" && string(b[data:data+size]) != "hello" {
			t.Errorf("init's data %q", b[data:data+size])
		}
		off = (data + size + 3) &^ 3
	}
	if !slices.Equal(names, []string{"dev", "dev/console", "init", "TRAILER!!!"}) {
		t.Errorf("entries %v", names)
	}
}

// TestFindKernelKeepsDigestByIdentity: the kernel's digest is read from the
// cache while the file is the same one (path, inode, size, mtime), so a
// trial does not read and hash 8 MB; a file that is another (here: a new
// mtime) is read and hashed again.
func TestFindKernelKeepsDigestByIdentity(t *testing.T) {
	dir, cache := t.TempDir(), t.TempDir()
	k := filepath.Join(dir, "vmlinux-test")
	write := func(body string, mtime time.Time) {
		t.Helper()
		f, err := os.OpenFile(k, os.O_WRONLY|os.O_CREATE, 0o644) // in place: the same inode
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(elf.ELFMAG + body)
		f.Close()
		os.Chtimes(k, mtime, mtime)
	}
	digest := func() string {
		t.Helper()
		got, err := FindKernel(context.Background(), k, cache)
		if err != nil {
			t.Fatal(err)
		}
		return got.Digest
	}
	when := time.Unix(1700000000, 0)
	tests := []struct {
		name, body string
		mtime      time.Time
		same       bool // the digest of the first body
	}{
		{"first", "aaaa", when, true},
		{"same identity, other bytes: not read again", "bbbb", when, true},
		{"another mtime: read again", "bbbb", when.Add(time.Second), false},
	}
	var first string
	for _, tc := range tests {
		write(tc.body, tc.mtime)
		d := digest()
		if first == "" {
			first = d
		}
		if (d == first) != tc.same {
			t.Errorf("%s: digest %s, first %s, want same=%v", tc.name, d, first, tc.same)
		}
	}
}
