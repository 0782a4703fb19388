package netsim_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/internal/testreq"
)

// TestRootless runs the core sandbox tests again as an unprivileged user
// (uid 65534): the test binary makes its own user and network namespaces,
// the sandbox creates its TUN device as the owner of its namespace. Only the
// device node needs to be 0666, as distributions ship it; this machine's is
// 0600, so the test binds a 0666 node over it in a mount namespace of its
// own (the host's node is not touched).
func TestRootless(t *testing.T) {
	if os.Getenv("NETSIM_TEST_ROOTLESS") != "" {
		t.Skip("already rootless")
	}
	testreq.NeedRootless(t)
	for _, tool := range []string{"unshare", "mknod", "mount"} {
		testreq.NeedTool(t, tool)
	}
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	bin := filepath.Join(dir, "netsim.test")
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, self); err != nil {
		t.Fatal(err)
	}
	out.Close()
	tmp := filepath.Join(dir, "tmp")
	os.Mkdir(tmp, 0o1777)
	os.Chmod(tmp, 0o1777)
	script := `set -e
mount --make-rprivate /
mkdir -p "$DIR/dev"
mount -t tmpfs tmpfs "$DIR/dev"
mknod -m 666 "$DIR/dev/tun" c 10 200
mount --bind "$DIR/dev/tun" /dev/net/tun
echo "uid=$(setpriv --reuid=65534 --regid=65534 --clear-groups id -u)"
exec setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH=/usr/local/bin:/usr/bin:/bin TMPDIR="$DIR/tmp" HOME="$DIR/tmp" NETSIM_TEST_ROOTLESS=1 "$DIR/netsim.test" -test.v -test.run '^(TestMockedClients|TestAllowRules|TestNoneBlocksEverything|TestCredentialInjection)$'
`
	cmd := exec.Command("unshare", "-m", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "DIR="+dir)
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "uid=65534\n") || !strings.Contains(string(b), "--- PASS: TestCredentialInjection") {
		t.Fatalf("rootless run: %v\n%s", err, b)
	}
}
