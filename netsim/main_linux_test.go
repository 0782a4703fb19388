package netsim_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec/netsim"
	"github.com/dryexec/dryexec/netsim/tun"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// Roles of the test binary. The outer process re-executes itself into a
// network namespace of its own ("host": the tests run there, with only lo),
// so nothing a test forwards can leave the machine; each sandbox is another
// re-execution ("sandbox") in a further network and mount namespace whose
// only route is the TUN device netsim serves.
const (
	roleEnv     = "NETSIM_TEST_ROLE"
	resolvEnv   = "NETSIM_TEST_RESOLV"
	bundleEnv   = "NETSIM_TEST_BUNDLE"
	linkEnv     = "NETSIM_TEST_LINK" // "ethernet": a TAP device instead of a TUN device
	roleHost    = "host"
	roleSandbox = "sandbox"
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case roleSandbox:
		sandboxMain()
		return
	case roleHost:
		if err := linkUp("lo"); err != nil {
			fmt.Fprintln(os.Stderr, "lo up:", err)
			os.Exit(1)
		}
		// Every goroutine a test started must be gone when the tests end.
		goleak.VerifyTestMain(m)
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Env = append(os.Environ(), roleEnv+"="+roleHost)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if os.Getuid() != 0 {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
	}
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			os.Exit(ee.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "netsim tests need a network namespace of their own:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func linkUp(name string) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	ifr, _ := unix.NewIfreq(name)
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr)
}

// sandboxMain is the guest's part: TUN, resolv.conf, trust store, then the
// client (exec, or a Go client run in-process).
func sandboxMain() {
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "sandbox: %s: %v\n", what, err)
		os.Exit(111)
	}
	if err := linkUp("lo"); err != nil {
		fail("lo", err)
	}
	setup := tun.SetupTUN
	if os.Getenv(linkEnv) == "ethernet" {
		setup = setupTAP
	}
	dev, err := setup("dx0")
	if err != nil {
		fail("tun", err)
	}
	sock := os.NewFile(3, "sock")
	c, err := net.FileConn(sock)
	if err != nil {
		fail("sock", err)
	}
	if err := tun.SendFD(c.(*net.UnixConn), dev); err != nil {
		fail("send fd", err)
	}
	dev.Close()
	c.Close()
	sock.Close()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fail("private mounts", err)
	}
	if p := os.Getenv(resolvEnv); p != "" {
		if err := unix.Mount(p, "/etc/resolv.conf", "", unix.MS_BIND, ""); err != nil {
			fail("bind resolv.conf", err)
		}
	}
	if p := os.Getenv(bundleEnv); p != "" {
		if err := unix.Mount(p, tun.SystemBundle, "", unix.MS_BIND, ""); err != nil {
			fail("bind trust store", err)
		}
	}
	args := flagArgs()
	if len(args) > 0 && args[0] == "goclient" {
		os.Exit(goClient(args[1:]))
	}
	if len(args) == 0 {
		fail("args", fmt.Errorf("no command"))
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		fail("lookpath", err)
	}
	fail("exec", syscall.Exec(path, args, os.Environ()))
}

// flagArgs returns what follows "--" on the command line (after the test
// binary's own flags).
func flagArgs() []string {
	for i, a := range os.Args {
		if a == "--" {
			return os.Args[i+1:]
		}
	}
	return nil
}

// goClient: goclient get URL | goclient bench N keepalive|new URL.
func goClient(args []string) int {
	switch args[0] {
	case "get":
		resp, err := http.Get(args[1])
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d %s", resp.StatusCode, b)
		return 0
	case "bench":
		n, _ := strconv.Atoi(args[1])
		tr := &http.Transport{DisableKeepAlives: args[2] == "new", TLSClientConfig: &tls.Config{}}
		cl := &http.Client{Transport: tr}
		// One warm-up request: DNS and the first leaf certificate.
		if err := get(cl, args[3]); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		start := time.Now()
		for i := 0; i < n; i++ {
			if err := get(cl, args[3]); err != nil {
				fmt.Println("error:", err)
				return 1
			}
		}
		fmt.Println(time.Since(start).Nanoseconds())
		return 0
	}
	return 2
}

func get(cl *http.Client, url string) error {
	resp, err := cl.Get(url)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// result is what a sandbox run printed.
type result struct {
	stdout, stderr string
	code           int
}

// sandboxOpts are the sandbox's trust set-up.
type sandboxOpts struct {
	env        []string // extra environment (e.g. the trust variables)
	bindBundle bool     // bind the bundle over the system trust store
	// ethernet: the sandbox's link is a TAP device (Ethernet frames, as a
	// VM's virtio-net carries them) served with ServeEthernet.
	ethernet bool
}

// runSandbox runs argv in a fresh sandbox whose network is sim.
func runSandbox(t testing.TB, sim *netsim.Sim, o sandboxOpts, argv ...string) result {
	t.Helper()
	dir := t.TempDir()
	resolv := dir + "/resolv.conf"
	if err := os.WriteFile(resolv, tun.ResolvConf(), 0o644); err != nil {
		t.Fatal(err)
	}
	tr := sim.Trust()
	bundle := dir + "/bundle.pem"
	if err := os.WriteFile(bundle, tr.Bundle, 0o644); err != nil {
		t.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	hostEnd, guestEnd := os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "guest")
	defer hostEnd.Close()

	cmd := exec.Command("/proc/self/exe", append([]string{"-test.run=^$", "--"}, argv...)...)
	cmd.Env = []string{roleEnv + "=" + roleSandbox, resolvEnv + "=" + resolv, "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir}
	if o.bindBundle {
		cmd.Env = append(cmd.Env, bundleEnv+"="+bundle)
	}
	serve := sim.ServeTUN
	if o.ethernet {
		cmd.Env = append(cmd.Env, linkEnv+"=ethernet")
		serve = sim.ServeEthernet
	}
	for _, e := range o.env {
		cmd.Env = append(cmd.Env, strings.ReplaceAll(e, "$BUNDLE", bundle))
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.ExtraFiles = []*os.File{guestEnd}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	guestEnd.Close()
	c, err := net.FileConn(hostEnd)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dev, err := tun.RecvFD(c.(*net.UnixConn))
	if err != nil {
		cmd.Wait()
		t.Fatalf("receiving the TUN fd: %v\nstderr: %s", err, stderr.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serve(ctx, dev) }()
	werr := cmd.Wait()
	cancel()
	if err := <-served; err != nil {
		t.Errorf("serving the link: %v", err)
	}
	code := 0
	if ee, ok := werr.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if werr != nil {
		t.Fatal(werr)
	}
	if code == 111 {
		t.Fatalf("sandbox set-up failed: %s", stderr.String())
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}
