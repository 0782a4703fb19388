// Package fctest is a fake Firecracker for tests: its REST API, real HTTP
// on a real unix socket, checking every request, and its vsock device's
// host-initiated handshake on a real unix socket. No VM runs.
//
// What it checks (a request that fails a check is answered as Firecracker
// answers it — 400 with a fault_message — and recorded as a violation):
//
//   - the HTTP: a known method and path, a JSON object body with a
//     Content-Length (Firecracker's server takes no chunked body) and
//     Content-Type application/json;
//   - each body against its definition in Firecracker's published spec
//     (swagger/firecracker.yaml): no field the spec lacks, every required
//     field, each field's JSON type, enums and integer ranges (vcpu_count
//     1–32, guest_cid ≥ 3, …); a drive's or interface's id in the body
//     equal to the one in the path; one root drive at most;
//   - that files named as inputs exist (kernel, initrd, drives, a snapshot
//     to load), as Firecracker opens them when asked;
//   - the order Firecracker enforces: configuration (machine-config,
//     boot-source, drives, vsock, network-interfaces) before InstanceStart
//     only; InstanceStart needs a boot source; PATCH /vm, SendCtrlAltDel
//     and snapshot/create after the start only; snapshot/create only while
//     Paused (and Diff only with track_dirty_pages); snapshot/load only in
//     a fresh process, before any configuration, and never twice;
//   - the vsock handshake: exactly "CONNECT <decimal port>\n" first on a
//     connection to uds_path, which exists only once the VM runs. A port
//     with a guest listener (ServeGuest) is answered "OK <host port>\n",
//     any other connection is closed, as Firecracker does. A snapshot
//     closes every connection (Firecracker resets the vsock's transport
//     when it saves the VM: its connections do not survive a snapshot,
//     the guest's listeners do);
//   - with a Backend, a real VM behind it: PATCH /vm pauses and resumes
//     it, snapshot/create saves it to mem_file_path, snapshot/load
//     restores it from there.
//
// What it cannot check: that a real Firecracker of some version agrees.
package fctest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Call is one request the fake answered.
type Call struct {
	Method, Path string
	Body         map[string]any
	Status       int
	// Fault is the fault_message of a refusal.
	Fault string
	// Violation: the request broke the spec or the order (not a fault the
	// test injected with Refuse).
	Violation bool
}

// Options configure a Server.
type Options struct {
	// ID is GET /'s instance id; empty: "anonymous-instance", Firecracker's
	// default.
	ID string
	// OnVsockRefused, when set, is called for each vsock connection closed
	// because no guest listener served its port.
	OnVsockRefused func(port uint32)
	// OnCall, when set, is called after each request is answered.
	OnCall func(Call)
	// Root, when set, is the jail the fake runs in, as under the jailer:
	// the paths requests name (kernel, drives, snapshots, the vsock
	// socket) are inside it.
	Root string
	// Backend, when set, boots a real VM at InstanceStart from what the
	// API configured (Started), or restores one at snapshot/load: the
	// fake then checks the requests and a real guest answers on the
	// vsock (BackendVM.Guest). Its error refuses the start or the load.
	// It and its VM's methods run with the fake's lock held: they must
	// not call the Server.
	Backend func(Started) (*BackendVM, error)
}

// BackendVM is a Backend's running VM.
type BackendVM struct {
	// Guest has a handler per guest vsock port (as ServeGuest's).
	Guest map[uint32]func(net.Conn)
	// Pause and Resume stop and restart the VM's vCPUs (PATCH /vm); nil:
	// the backend cannot, and the request is refused.
	Pause, Resume func() error
	// Save writes the paused VM's whole state (its memory and devices)
	// to memPath (snapshot/create), which Started.Restore later names;
	// nil: the backend cannot, and the request is refused.
	Save func(memPath string) error
}

// Started is the VM an InstanceStart asks for, the paths as the host sees
// them, with the means for a Backend to play its guest's vsock side.
type Started struct {
	Kernel, Initrd, BootArgs string
	VCPUs                    int
	MemMiB                   int64
	Drives                   []StartedDrive
	// Restore, when set, is a memory file BackendVM.Save wrote: the VM is
	// restored from it (snapshot/load) instead of booted, with the
	// configuration it was saved with, running if Resume, else paused.
	Restore string
	Resume  bool
	// Reset ends the VM as a guest's reset ends Firecracker's process:
	// the sockets go and Exited is closed.
	Reset func()
}

// StartedDrive is a configured drive.
type StartedDrive struct {
	ID, Path string
	ReadOnly bool
}

// Server is the fake. Its zero value is not usable: Listen makes one.
type Server struct {
	opt  Options
	sock string
	ln   net.Listener
	srv  *http.Server
	done chan struct{}

	mu         sync.Mutex
	calls      []Call
	refuse     map[string]string
	configured bool // any pre-boot configuration: no snapshot/load after it
	loaded     bool
	started    bool
	paused     bool
	exiting    bool
	exited     bool
	cfg        vmConfig
	guest      map[uint32]func(net.Conn)
	vm         *BackendVM
	vconns     []net.Conn // vsock connections acknowledged, until a snapshot
	vsockLn    net.Listener
	hostPort   uint32
	conns      sync.WaitGroup
}

// vmConfig is what the fake keeps of the configuration, and what its
// snapshot file holds.
type vmConfig struct {
	Machine map[string]any            `json:"machine"`
	Boot    map[string]any            `json:"boot"`
	Drives  map[string]map[string]any `json:"drives"`
	Nets    map[string]map[string]any `json:"nets"`
	Vsock   map[string]any            `json:"vsock"`
}

// snapshotMagic marks the fake's snapshot files.
const snapshotMagic = "fctest-snapshot-v1"

// Listen serves the fake API on a new unix socket at sock, which must not
// exist yet.
func Listen(sock string, opt Options) (*Server, error) {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	s := &Server{opt: opt, sock: sock, ln: ln, done: make(chan struct{}), refuse: map[string]string{},
		guest: map[uint32]func(net.Conn){}, hostPort: 1 << 30}
	s.cfg.Drives = map[string]map[string]any{}
	s.cfg.Nets = map[string]map[string]any{}
	s.srv = &http.Server{Handler: s}
	go s.srv.Serve(ln)
	return s, nil
}

// Socket is the API socket's path.
func (s *Server) Socket() string { return s.sock }

// Refuse makes the fake answer the request "METHOD /path" with 400 and
// fault (after checking it): a refusal Firecracker could give that the
// fake cannot provoke, such as a bad kernel or a failed start.
func (s *Server) Refuse(methodPath, fault string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse[methodPath] = fault
}

// ServeGuest plays a guest listening on vsock port: each connection to it
// is acknowledged and handed to h (on its own goroutine) as the guest's
// end. It may be called before or after the start, as a guest's listener
// comes up while it boots.
func (s *Server) ServeGuest(port uint32, h func(conn net.Conn)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.guest[port] = h
}

// Calls returns the requests answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Violations returns the requests that broke the spec or the order.
func (s *Server) Violations() []Call {
	var v []Call
	for _, c := range s.Calls() {
		if c.Violation {
			v = append(v, c)
		}
	}
	return v
}

// State is what GET / reports.
func (s *Server) State() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state()
}

func (s *Server) state() string {
	switch {
	case !s.started:
		return "Not started"
	case s.paused:
		return "Paused"
	}
	return "Running"
}

// Exited is closed when the fake's VM has shut down (SendCtrlAltDel, which
// a guest with a keyboard driver answers by resetting, and Firecracker
// then exits) or the server is closed.
func (s *Server) Exited() <-chan struct{} { return s.done }

// Close stops serving and removes the sockets.
func (s *Server) Close() error {
	s.mu.Lock()
	s.exitLocked()
	s.mu.Unlock()
	// exitLocked closed the listener already; http.Server.Close closes
	// it again and says so unless Serve has noticed first, a race that
	// is no failure of the fake's process ending.
	err := s.srv.Close()
	s.conns.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// exitLocked ends the "VM": the vsock socket goes, and the API socket too,
// as when Firecracker's process ends.
func (s *Server) exitLocked() {
	if s.exited {
		return
	}
	s.exited = true
	if s.vsockLn != nil {
		s.vsockLn.Close()
		os.Remove(s.host(s.cfg.Vsock["uds_path"].(string)))
	}
	s.ln.Close()
	os.Remove(s.sock)
	close(s.done)
}

// Fault messages, in Firecracker's words.
const (
	faultPostBoot   = "The requested operation is not supported after starting the microVM."
	faultPreBoot    = "The requested operation is not supported before starting the microVM."
	faultNoKernel   = "Start microvm error: Cannot start microvm without kernel configuration."
	faultLoadLate   = "Load snapshot error: Loading a microVM snapshot not allowed after configuring boot-specific resources."
	faultNotPaused  = "Create snapshot error: Cannot save the microVM state: Operation not allowed: save/restore unavailable while running"
	faultDiffNoDirt = "The requested operation is not supported: Diff snapshots are not allowed on uVMs with dirty page tracking disabled."
	faultIDMismatch = "The id from the path does not match the id from the body!"
	faultSecondRoot = "Drive config error: A root block device already exists!"
	faultParse      = "An error occurred when deserializing the json body of a request: "
)

// refusal is a 400 the fake gives; violation false for injected faults.
type refusal struct {
	fault     string
	violation bool
}

func bad(format string, args ...any) *refusal {
	return &refusal{fault: fmt.Sprintf(format, args...), violation: true}
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	call := Call{Method: r.Method, Path: r.URL.Path}
	status, out, ref := s.handle(r, &call)
	if ref != nil {
		status = http.StatusBadRequest
		call.Fault, call.Violation = ref.fault, ref.violation
		out, _ = json.Marshal(map[string]string{"fault_message": ref.fault})
	}
	call.Status = status
	s.calls = append(s.calls, call)
	if s.opt.OnCall != nil {
		s.opt.OnCall(call)
	}
	if out != nil {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	w.Write(out)
	if s.exiting {
		w.(http.Flusher).Flush()
		s.exitLocked()
	}
}

// handle checks and applies one request: the status and body of success,
// or a refusal.
func (s *Server) handle(r *http.Request, call *Call) (int, []byte, *refusal) {
	if s.exited {
		return 0, nil, bad("the microVM has exited")
	}
	route := r.Method + " " + routeOf(r.URL.Path)
	sch, known := routes[route]
	if !known {
		return 0, nil, bad("Invalid request method and/or path: %s %s.", r.Method, r.URL.Path)
	}
	if r.Method == http.MethodGet {
		info, _ := json.Marshal(map[string]string{"app_name": "Firecracker", "id": s.id(), "state": s.state(), "vmm_version": "0.0.0-fctest"})
		return http.StatusOK, info, nil
	}
	if len(r.TransferEncoding) > 0 || r.ContentLength < 0 {
		return 0, nil, bad("Chunked transfer encoding is not supported; a body needs a Content-Length.")
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		return 0, nil, bad("Content-Type %q, want application/json.", ct)
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 51200+1))
	if err != nil || len(raw) > 51200 {
		return 0, nil, bad("The request body is too large or unreadable.")
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil || body == nil {
		return 0, nil, bad(faultParse+"%v", cmpErr(err, "not a JSON object"))
	}
	call.Body = body
	if err := sch.check(body); err != nil {
		return 0, nil, bad(faultParse+"%v", err)
	}
	if ref := s.order(r.Method, r.URL.Path, body); ref != nil {
		return 0, nil, ref
	}
	// Firecracker marks the boot path when it takes a configuration
	// request, whether or not the configuration then succeeds.
	s.configured = s.configured || preBoot[routeOf(r.URL.Path)]
	if fault, ok := s.refuse[route]; ok {
		return 0, nil, &refusal{fault: fault}
	}
	if ref := s.apply(r.Method, r.URL.Path, body); ref != nil {
		return 0, nil, ref
	}
	return http.StatusNoContent, nil, nil
}

func cmpErr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// host is a path a request named, as the host sees it.
func (s *Server) host(p string) string {
	if s.opt.Root == "" {
		return p
	}
	return filepath.Join(s.opt.Root, p)
}

func (s *Server) id() string {
	if s.opt.ID != "" {
		return s.opt.ID
	}
	return "anonymous-instance"
}

// routes are the fake's endpoints and their bodies' definitions: the ones
// the driver uses. Any other request is answered as an unknown one is, and
// counts as a violation.
var routes = map[string]schema{
	"GET /":                        nil,
	"PUT /machine-config":          machineConfigSchema,
	"PUT /boot-source":             bootSourceSchema,
	"PUT /drives/{id}":             driveSchema,
	"PUT /vsock":                   vsockSchema,
	"PUT /network-interfaces/{id}": netSchema,
	"PUT /actions":                 actionSchema,
	"PATCH /vm":                    vmSchema,
	"PUT /snapshot/create":         snapshotCreateSchema,
	"PUT /snapshot/load":           snapshotLoadSchema,
}

// routeOf turns a path with an id into its route.
func routeOf(p string) string {
	for _, pre := range []string{"/drives/", "/network-interfaces/"} {
		if id, ok := strings.CutPrefix(p, pre); ok && id != "" && !strings.Contains(id, "/") {
			return pre + "{id}"
		}
	}
	return p
}

// preBoot are the configuration routes: before InstanceStart only, and
// each rules out a later snapshot/load.
var preBoot = map[string]bool{
	"/machine-config": true, "/boot-source": true, "/drives/{id}": true, "/vsock": true, "/network-interfaces/{id}": true,
}

// order applies Firecracker's ordering rules.
func (s *Server) order(method, path string, body map[string]any) *refusal {
	route := routeOf(path)
	switch {
	case preBoot[route]:
		if s.started {
			return bad(faultPostBoot)
		}
	case route == "/actions":
		switch body["action_type"] {
		case "InstanceStart":
			if s.started {
				return bad(faultPostBoot)
			}
			if s.cfg.Boot == nil {
				return bad(faultNoKernel)
			}
		case "SendCtrlAltDel":
			if !s.started {
				return bad(faultPreBoot)
			}
		}
	case route == "/vm":
		if !s.started {
			return bad(faultPreBoot)
		}
	case route == "/snapshot/create":
		if !s.started {
			return bad(faultPreBoot)
		}
		if !s.paused {
			return bad(faultNotPaused)
		}
		if body["snapshot_type"] == "Diff" && s.cfg.Machine["track_dirty_pages"] != true {
			return bad(faultDiffNoDirt)
		}
	case route == "/snapshot/load":
		if s.started || s.loaded {
			return bad(faultPostBoot)
		}
		if s.configured {
			return bad(faultLoadLate)
		}
	}
	return nil
}

// apply makes a checked request take effect.
func (s *Server) apply(method, path string, body map[string]any) *refusal {
	route := routeOf(path)
	switch route {
	case "/machine-config":
		s.cfg.Machine = body
	case "/boot-source":
		for _, k := range []string{"kernel_image_path", "initrd_path"} {
			if p, ok := body[k].(string); ok {
				if _, err := os.Stat(s.host(p)); err != nil {
					return bad("Boot source error: The %s file cannot be opened: %v", strings.TrimSuffix(k, "_path"), err)
				}
			}
		}
		s.cfg.Boot = body
	case "/drives/{id}":
		id := strings.TrimPrefix(path, "/drives/")
		if body["drive_id"] != id {
			return bad(faultIDMismatch)
		}
		if p, ok := body["path_on_host"].(string); !ok {
			return bad("Drive config error: path_on_host is required for a virtio-block drive")
		} else if _, err := os.Stat(s.host(p)); err != nil {
			return bad("Drive config error: Unable to create the virtio block device: %v", err)
		}
		if body["is_root_device"] == true {
			for other, d := range s.cfg.Drives {
				if other != id && d["is_root_device"] == true {
					return bad(faultSecondRoot)
				}
			}
		}
		s.cfg.Drives[id] = body
	case "/network-interfaces/{id}":
		id := strings.TrimPrefix(path, "/network-interfaces/")
		if body["iface_id"] != id {
			return bad(faultIDMismatch)
		}
		if n := body["host_dev_name"].(string); n == "" || len(n) > 15 {
			return bad("Network config error: Open tap device failed: invalid name %q", n)
		}
		s.cfg.Nets[id] = body
	case "/vsock":
		s.cfg.Vsock = body
	case "/actions":
		switch body["action_type"] {
		case "InstanceStart":
			if err := s.listenVsock(); err != nil {
				return bad("Start microvm error: Cannot create the vsock device: %v", err)
			}
			if err := s.backendStart(s.startedLocked()); err != nil {
				return bad("Start microvm error: %v", err)
			}
			s.started = true
		case "SendCtrlAltDel":
			// Firecracker answers, then the guest resets and the process
			// exits: the exit follows the answer (ServeHTTP).
			s.exiting = true
		}
	case "/vm":
		pause := body["state"] == "Paused"
		if s.vm != nil {
			do := s.vm.Resume
			if pause {
				do = s.vm.Pause
			}
			if do == nil {
				return &refusal{fault: "fctest: the backend cannot pause or resume its VM"}
			}
			if err := do(); err != nil {
				return &refusal{fault: fmt.Sprintf("fctest: the backend's VM: %v", err)}
			}
		}
		s.paused = pause
	case "/snapshot/create":
		return s.create(body)
	case "/snapshot/load":
		return s.load(body)
	}
	return nil
}

// create writes the fake's snapshot: its configuration as the state
// file, and the memory file (the backend's VM saved to it, or a marker),
// then resets the vsock's transport as Firecracker does, closing every
// connection.
func (s *Server) create(body map[string]any) *refusal {
	state, _ := json.Marshal(struct {
		Magic string   `json:"magic"`
		Cfg   vmConfig `json:"cfg"`
	}{snapshotMagic, s.cfg})
	if err := os.WriteFile(s.host(body["snapshot_path"].(string)), state, 0o600); err != nil {
		return bad("Create snapshot error: Cannot perform open on the snapshot backing file: %v", err)
	}
	mem := s.host(body["mem_file_path"].(string))
	if s.vm != nil {
		if s.vm.Save == nil {
			return &refusal{fault: "fctest: the backend cannot save its VM"}
		}
		if err := s.vm.Save(mem); err != nil {
			return &refusal{fault: fmt.Sprintf("Create snapshot error: Cannot save the microVM memory: %v", err)}
		}
	} else if err := os.WriteFile(mem, []byte(snapshotMagic+" memory\n"), 0o600); err != nil {
		return bad("Create snapshot error: Cannot perform open on the memory backing file: %v", err)
	}
	for _, c := range s.vconns {
		c.Close()
	}
	s.vconns = nil
	return nil
}

// backendStart has the Backend boot or restore st, once the vsock's
// socket is bound; its error unbinds it.
func (s *Server) backendStart(st Started) error {
	if s.opt.Backend == nil {
		return nil
	}
	vm, err := s.opt.Backend(st)
	if err != nil {
		if s.vsockLn != nil {
			s.vsockLn.Close()
			os.Remove(s.host(s.cfg.Vsock["uds_path"].(string)))
			s.vsockLn = nil
		}
		return err
	}
	s.vm = vm
	maps.Copy(s.guest, vm.Guest)
	return nil
}

// load restores the fake's snapshot: exactly one memory source, both files
// there, the vsock socket bound again at its recorded path (or the
// override's).
func (s *Server) load(body map[string]any) *refusal {
	_, file := body["mem_file_path"]
	_, backend := body["mem_backend"]
	if file == backend {
		return bad(faultParse + "exactly one of mem_file_path and mem_backend is required")
	}
	mem, _ := body["mem_file_path"].(string)
	if backend {
		mb := body["mem_backend"].(map[string]any)
		if mb["backend_type"] != "File" {
			return bad("Load snapshot error: the fake serves File memory backends only")
		}
		mem = mb["backend_path"].(string)
	}
	raw, err := os.ReadFile(s.host(body["snapshot_path"].(string)))
	var snap struct {
		Magic string   `json:"magic"`
		Cfg   vmConfig `json:"cfg"`
	}
	if err == nil {
		err = json.Unmarshal(raw, &snap)
	}
	if err == nil && snap.Magic != snapshotMagic {
		err = errors.New("not a snapshot file")
	}
	if err == nil {
		_, err = os.Stat(s.host(mem))
	}
	if err != nil {
		return bad("Load snapshot error: Failed to restore from snapshot: %v", err)
	}
	s.cfg = snap.Cfg
	if o, ok := body["vsock_override"].(map[string]any); ok && s.cfg.Vsock != nil {
		s.cfg.Vsock["uds_path"] = o["uds_path"]
	}
	if err := s.listenVsock(); err != nil {
		return bad("Load snapshot error: Failed to restore from snapshot: vsock: %v", err)
	}
	st := s.startedLocked()
	st.Restore, st.Resume = s.host(mem), body["resume_vm"] == true
	if err := s.backendStart(st); err != nil {
		return &refusal{fault: fmt.Sprintf("Load snapshot error: Failed to restore from snapshot: %v", err)}
	}
	s.loaded, s.started = true, true
	s.paused = !st.Resume
	return nil
}

// startedLocked is the configured VM, for a Backend.
func (s *Server) startedLocked() Started {
	st := Started{Reset: func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.exitLocked()
	}}
	str := func(m map[string]any, k string) string { v, _ := m[k].(string); return v }
	st.Kernel, st.Initrd, st.BootArgs = s.host(str(s.cfg.Boot, "kernel_image_path")), str(s.cfg.Boot, "initrd_path"), str(s.cfg.Boot, "boot_args")
	if st.Initrd != "" {
		st.Initrd = s.host(st.Initrd)
	}
	if n, ok := s.cfg.Machine["vcpu_count"].(float64); ok {
		st.VCPUs = int(n)
	}
	if n, ok := s.cfg.Machine["mem_size_mib"].(float64); ok {
		st.MemMiB = int64(n)
	}
	ids := make([]string, 0, len(s.cfg.Drives))
	for id := range s.cfg.Drives {
		ids = append(ids, id)
	}
	// Firecracker attaches drives in the order they were configured; the
	// fake keeps a map, so in id order (the guest finds drives by id).
	slices.Sort(ids)
	for _, id := range ids {
		d := s.cfg.Drives[id]
		st.Drives = append(st.Drives, StartedDrive{ID: id, Path: s.host(str(d, "path_on_host")), ReadOnly: d["is_read_only"] == true})
	}
	return st
}

// listenVsock binds the vsock device's socket, if there is a device. A
// file already at the path is an error (a stale socket of an earlier
// process).
func (s *Server) listenVsock() error {
	if s.cfg.Vsock == nil {
		return nil
	}
	ln, err := net.Listen("unix", s.host(s.cfg.Vsock["uds_path"].(string)))
	if err != nil {
		return err
	}
	s.vsockLn = ln
	s.conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Go(func() { s.vsockConn(c) })
		}
	})
	return nil
}

// vsockConn runs the host-initiated handshake on one connection.
func (s *Server) vsockConn(c net.Conn) {
	line, err := readLine(c)
	port, perr := strconv.ParseUint(strings.TrimPrefix(line, "CONNECT "), 10, 32)
	if err != nil || !strings.HasPrefix(line, "CONNECT ") || perr != nil {
		s.mu.Lock()
		s.calls = append(s.calls, Call{Method: "VSOCK", Path: s.cfg.Vsock["uds_path"].(string), Status: 400,
			Fault: fmt.Sprintf("bad CONNECT line %q (%v)", line, err), Violation: true})
		s.mu.Unlock()
		c.Close()
		return
	}
	s.mu.Lock()
	h := s.guest[uint32(port)]
	s.hostPort++
	hp := s.hostPort
	s.mu.Unlock()
	if h == nil {
		c.Close()
		if s.opt.OnVsockRefused != nil {
			s.opt.OnVsockRefused(uint32(port))
		}
		return
	}
	if _, err := fmt.Fprintf(c, "OK %d\n", hp); err != nil {
		c.Close()
		return
	}
	s.mu.Lock()
	s.vconns = append(s.vconns, c)
	s.mu.Unlock()
	// The guest's end is the handler's to close.
	go h(c)
}

// readLine reads up to a newline, a byte at a time, at most 64 bytes.
func readLine(c net.Conn) (string, error) {
	var line []byte
	b := make([]byte, 1)
	for len(line) < 64 {
		if _, err := io.ReadFull(c, b); err != nil {
			return string(line), err
		}
		if b[0] == '\n' {
			return string(line), nil
		}
		line = append(line, b[0])
	}
	return string(line), errors.New("no newline within 64 bytes")
}
