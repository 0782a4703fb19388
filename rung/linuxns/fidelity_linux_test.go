package linuxns

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// fidelityScript does, in one trial, what a path-based walk or a JSON string
// lost: a tree deeper than PATH_MAX, names that are not UTF-8 (one deleted
// beside its U+FFFD look-alike), a named pipe, a hard link to a host file, a
// set-back mtime, and a host dir renamed with rename(2) itself (as root the
// overlay's redirect_dir=on, rootless the supervisor's renamer).
const fidelityScript = `
import os, sys
os.rename("hostdir", "hostdir2")
os.remove(b"v\xff")
with open(b"bad\xff\xfe.txt", "w") as f: f.write("new\n")
os.symlink(b"t\xff", b"s\xfe")
os.mkfifo("pipe", 0o640)
os.link("host", "host2")
with open("old", "w") as f: f.write("old\n")
os.utime("old", ns=(981173106123456789, 981173106123456789))
fd = os.open(".", os.O_RDONLY)
os.mkdir("deep", dir_fd=fd)
for _ in range(5000):
    nfd = os.open("deep" if _ == 0 else "c", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = nfd
    os.mkdir("c", dir_fd=fd)
nfd = os.open("c", os.O_RDONLY, dir_fd=fd)
f = os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=nfd)
os.write(f, b"deep\n")
`

func TestTrialFileFidelity(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	for name, content := range map[string]string{
		"v\xff": "bytes\n", "v\ufffd": "replacement\n", "host": "host\n", "hostdir/a": "a\n", "hostdir/sub/b": "b\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, dir)
	d := runTrial(t, dir, dryexec.TrialSpec{}, "/usr/bin/python3", "-c", fidelityScript)
	if d.Process.ExitCode != 0 {
		t.Fatalf("exit %d: %s", d.Process.ExitCode, d.Process.Stderr)
	}
	sameSnapshot(t, before, snapshot(t, dir))
	// The delta survives its own JSON form (path_b64 and link_target_b64).
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back dryexec.StateDelta
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	byPath := map[string][]dryexec.FileChange{}
	for _, f := range back.Files {
		rel, ok := strings.CutPrefix(f.Path, dir+"/")
		if ok {
			byPath[rel] = append(byPath[rel], f)
		}
	}
	one := func(rel string, op dryexec.Op) *dryexec.FileChange {
		t.Helper()
		for i, f := range byPath[rel] {
			if f.Op == op {
				return &byPath[rel][i]
			}
		}
		t.Errorf("no %s of %s in the delta", op, dryexec.QuotePath(rel))
		return &dryexec.FileChange{}
	}
	shaOf := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

	if f := one("v\xff", dryexec.OpDelete); f.BeforeSHA256 != shaOf("bytes\n") {
		t.Errorf("delete of v\\xff: before_sha256 %s, not its content's", f.BeforeSHA256)
	}
	if _, ok := byPath["v\ufffd"]; ok {
		t.Errorf("v\\ufffd, which the command never touched, is in the delta: %+v", byPath["v\ufffd"])
	}
	one("bad\xff\xfe.txt", dryexec.OpCreate)
	if f := one("s\xfe", dryexec.OpSymlink); f.LinkTarget != "t\xff" {
		t.Errorf("symlink target %q", f.LinkTarget)
	}
	if f := one("pipe", dryexec.OpCreate); f.Kind != dryexec.KindFIFO || f.Mode != "0640" {
		t.Errorf("named pipe reported as %s %s", f.Kind, f.Mode)
	}
	h, h2 := one("host", dryexec.OpModify), one("host2", dryexec.OpCreate)
	if h.LinkGroup == 0 || h.LinkGroup != h2.LinkGroup || h.SHA256 != h.BeforeSHA256 {
		t.Errorf("hard link to a host file: groups %d and %d, sha256 %s before %s", h.LinkGroup, h2.LinkGroup, h.SHA256, h.BeforeSHA256)
	}
	if f := one("old", dryexec.OpCreate); f.MtimeNS != 981173106123456789 {
		t.Errorf("mtime_ns %d, want the one the command set", f.MtimeNS)
	}
	deep := "deep" + strings.Repeat("/c", 5000) + "/f"
	if f := one(deep, dryexec.OpCreate); f.SHA256 != shaOf("deep\n") {
		t.Errorf("the file 5001 dirs deep: sha256 %s", f.SHA256)
	}
	one("hostdir/a", dryexec.OpDelete)
	one("hostdir/sub", dryexec.OpRmdir)
	one("hostdir2", dryexec.OpMkdir)
	if f := one("hostdir2/sub/b", dryexec.OpCreate); f.SHA256 != shaOf("b\n") {
		t.Errorf("hostdir2/sub/b: sha256 %s", f.SHA256)
	}
}
