package netrole

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/containment/seccomp"
	"github.com/dryexec/dryexec/netsim"
	"github.com/dryexec/dryexec/netsim/ca"
	"github.com/dryexec/dryexec/netsim/mock"
	"github.com/dryexec/dryexec/netsim/netproc"
	"github.com/dryexec/dryexec/netsim/tun"
)

// nobody is the uid and gid the role drops to when it starts as root.
const nobody = 65534

// MaybeMain runs the role and exits when args (os.Args) ask for it; else it
// returns at once. Every binary Start may run (dryexec, dryexec-netsim, and
// test binaries through TestMain) calls it, or MaybeMainOpenAPI, first thing.
// A role started through MaybeMain serves no OpenAPI mock: a mock file naming
// one is refused as a bad config (mock.ErrNoOpenAPI).
func MaybeMain(args []string) { MaybeMainOpenAPI(args, nil) }

// MaybeMainOpenAPI is MaybeMain for a binary that serves OpenAPI mocks with
// load (package netsim/mock/openapi's Load): dryexec-netsim-openapi, which
// Start runs for a mock file naming OpenAPI documents. The CLI and
// dryexec-netsim do not, so as not to pay for kin-openapi's initialisation at
// every start.
func MaybeMainOpenAPI(args []string, load mock.LoadAPI) {
	if !netproc.IsRole(args) {
		return
	}
	os.Exit(role(load, nil))
}

// role is the role: descriptor 3 is the control socket, 4 the socket the
// sandbox's TUN device arrives on, or the sandbox's link itself (Setup.Link).
// attempt, when not nil, runs once the role
// is confined instead of serving (this package's tests: tries to break out).
func role(openAPI mock.LoadAPI, attempt func(out *sender, dec *json.Decoder) int) int {
	ctrlF, linkF := os.NewFile(3, "ctrl"), os.NewFile(4, "link")
	fc, err := net.FileConn(ctrlF)
	ctrlF.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "netsim role: control socket:", err)
		return 2
	}
	ctrl := fc.(*net.UnixConn)
	out := newSender(ctrl)
	defer out.close()

	dec := json.NewDecoder(bufio.NewReader(ctrl))
	var setup netproc.Setup
	if err := dec.Decode(&setup); err != nil {
		linkF.Close()
		fmt.Fprintln(os.Stderr, "netsim role: reading the setup:", err)
		return 2
	}
	// The hand-over socket is made a connection before the role confines
	// itself; an Ethernet link stays a file until ServeEthernet takes it.
	var link *net.UnixConn
	switch setup.Link {
	case netproc.LinkTUN:
		lc, err := net.FileConn(linkF)
		linkF.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "netsim role: link socket:", err)
			return 2
		}
		link = lc.(*net.UnixConn)
	case netproc.LinkEthernet:
	default:
		linkF.Close()
		fmt.Fprintf(os.Stderr, "netsim role: unknown link %q\n", setup.Link)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sim, err := newSim(ctx, &setup, openAPI, out)
	if err != nil {
		linkF.Close()
		out.send(netproc.Msg{Kind: netproc.MsgDone, Err: err.Error(), BadConfig: errors.Is(err, netsim.ErrBadConfig)})
		return 0
	}
	conf, err := confine()
	if err != nil {
		linkF.Close()
		out.send(netproc.Msg{Kind: netproc.MsgDone, Err: "confining the netsim process: " + err.Error()})
		return 0
	}
	out.send(netproc.Msg{Kind: netproc.MsgReady, Confinement: conf})
	if attempt != nil {
		return attempt(out, dec)
	}
	// The parent ends the network by shutting down its side: EOF here.
	go func() {
		control(dec, out)
		cancel()
		// A device already waiting is still taken and drained (a role
		// started only once the sandbox sent something, and stopped at
		// once, has its packets to log); else closing wakes RecvFD.
		if link != nil && !deviceWaiting(link) {
			link.Close()
		}
	}()
	go func() {
		<-sim.Quiet()
		out.send(netproc.Msg{Kind: netproc.MsgQuiet})
	}()
	if link == nil {
		err = sim.ServeEthernet(ctx, linkF)
	} else {
		var dev *os.File
		dev, err = tun.RecvFD(link)
		if err == nil {
			err = sim.ServeTUN(ctx, dev)
		} else if ctx.Err() != nil {
			err = nil // stopped before the sandbox sent its device
		} else {
			err = fmt.Errorf("receiving the TUN device: %w", err)
		}
	}
	m := netproc.Msg{Kind: netproc.MsgDone}
	if err != nil {
		m.Err = err.Error()
	}
	out.send(m)
	return 0
}

// newSim makes the Sim setup describes, with what the parent read for it.
func newSim(ctx context.Context, setup *netproc.Setup, openAPI mock.LoadAPI, out *sender) (*netsim.Sim, error) {
	c, err := ca.Parse(setup.CA)
	if err != nil {
		return nil, fmt.Errorf("netsim CA: %w", err)
	}
	cfg := netsim.Config{
		MockFile: setup.MockFile, Allow: setup.Allow, Seed: setup.Seed, CA: c,
		MaxBodyBytes: setup.MaxBodyBytes, MaxEvents: setup.MaxEvents, SniffTimeout: setup.SniffTimeout,
		OpenAPI:   openAPI,
		LookupEnv: func(k string) (string, bool) { v, ok := setup.Env[k]; return v, ok },
		ReadSecretFile: func(p string) ([]byte, error) {
			if b, ok := setup.Files[p]; ok {
				return b, nil
			}
			return nil, &os.PathError{Op: "open", Path: p, Err: os.ErrNotExist}
		},
		OnRecord: func(r netsim.Record, kept bool) {
			out.send(netproc.Msg{Kind: netproc.MsgRecord, Record: &r, Kept: kept})
		},
	}
	if len(setup.Roots) > 0 {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(setup.Roots)
		cfg.UpstreamRoots = pool
	}
	sim, err := netsim.New(ctx, cfg)
	if errors.Is(err, mock.ErrNoOpenAPI) {
		err = fmt.Errorf("%w (%s serves them: make build installs it beside dryexec; %s names another)", err, netproc.OpenAPIExeName, netproc.OpenAPIExeEnv)
	}
	return sim, err
}

// confine drops what the role does not need; the Landlock domain and
// no_new_privs it inherited from the parent's starting thread already hold.
func confine() (*netproc.Confinement, error) {
	if os.Geteuid() == 0 {
		// Go applies these to every thread. Leaving uid 0 clears the
		// permitted, effective and ambient capability sets.
		if err := syscall.Setgroups(nil); err != nil {
			return nil, fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setgid(nobody); err != nil {
			return nil, fmt.Errorf("setgid: %w", err)
		}
		if err := syscall.Setuid(nobody); err != nil {
			return nil, fmt.Errorf("setuid: %w", err)
		}
	}
	// Measured before the filter, which refuses capget and prctl.
	c := &netproc.Confinement{UID: os.Getuid(), GID: os.Getgid(), CapEff: capEff()}
	abi, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e == 0 && inDomain() {
		c.Landlock = int(abi)
	}
	prog, err := seccomp.AllowList(allowedCalls(), unix.EPERM)
	if err != nil {
		return nil, err
	}
	if err := seccomp.InstallAllThreads(prog); err != nil {
		return nil, err
	}
	c.Seccomp, c.NoNewPrivs = true, true // InstallAllThreads set it on every thread
	return c, nil
}

// inDomain reports whether this process runs in a Landlock domain: reading
// /proc/self/status is refused inside the role's (it grants nothing there),
// and allowed outside one.
func inDomain() bool {
	_, err := os.ReadFile("/proc/self/status")
	return errors.Is(err, os.ErrPermission)
}

// capEff is the effective capability set of the calling thread.
func capEff() uint64 {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return ^uint64(0)
	}
	return uint64(data[1].Effective)<<32 | uint64(data[0].Effective)
}

// sender writes the role's messages in order from one goroutine, so that
// netsim's log callback (called with the log locked) never waits on the
// socket.
type sender struct {
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []netproc.Msg
	closed bool
	done   chan struct{}
}

// control answers the parent's syncs until it shuts its side down (EOF):
// each answer is queued behind every event already sent, so once the
// parent reads it, its log holds them.
func control(dec *json.Decoder, out *sender) {
	for {
		var c netproc.Control
		if err := dec.Decode(&c); err != nil {
			return
		}
		if c.Kind == netproc.CtrlSync {
			out.send(netproc.Msg{Kind: netproc.MsgSynced, Seq: c.Seq})
		}
	}
}

func newSender(c *net.UnixConn) *sender {
	s := &sender{done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go func() {
		defer close(s.done)
		w := bufio.NewWriterSize(c, 64<<10)
		enc := json.NewEncoder(w)
		for {
			s.mu.Lock()
			for len(s.queue) == 0 && !s.closed {
				s.cond.Wait()
			}
			q := s.queue
			s.queue = nil
			closed := s.closed
			s.mu.Unlock()
			for _, m := range q {
				if err := enc.Encode(m); err != nil {
					return
				}
			}
			if err := w.Flush(); err != nil || closed {
				return
			}
		}
	}()
	return s
}

func (s *sender) send(m netproc.Msg) {
	s.mu.Lock()
	s.queue = append(s.queue, m)
	s.mu.Unlock()
	s.cond.Signal()
}

// close flushes what is queued and waits for it to be written.
func (s *sender) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cond.Signal()
	<-s.done
}

// deviceWaiting says whether the sandbox's device waits on link, unread:
// its message (a byte of data, tun.SendFD) is there. It peeks without
// taking the descriptor.
func deviceWaiting(link *net.UnixConn) bool {
	rc, err := link.SyscallConn()
	if err != nil {
		return false
	}
	waiting := false
	rc.Control(func(fd uintptr) {
		n, _, _, _, err := unix.Recvmsg(int(fd), make([]byte, 1), nil, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		waiting = err == nil && n > 0
	})
	return waiting
}
