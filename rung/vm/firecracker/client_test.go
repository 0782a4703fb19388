package firecracker

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/rung/vm/firecracker/fctest"
)

// newFake serves a fake API in dir, with the inputs Firecracker opens.
func newFake(t *testing.T, dir string) (*fctest.Server, *Client) {
	t.Helper()
	files(t, dir, "vmlinux", "initrd", "root.img", "scratch.img")
	s, err := fctest.Listen(filepath.Join(dir, "api.sock"), fctest.Options{ID: "vm-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c := NewClient(s.Socket())
	t.Cleanup(c.Close)
	return s, c
}

// TestClientRequests: each call sends the method, path and body the spec
// defines, in an order Firecracker takes, and the fake finds nothing
// wrong with any of them.
func TestClientRequests(t *testing.T) {
	dir := shortDir(t)
	s, c := newFake(t, dir)
	p := func(n string) string { return filepath.Join(dir, n) }
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		call   func() error
		method string
		path   string
		body   map[string]any
	}{
		{"machine config", func() error {
			return c.PutMachineConfig(ctx, MachineConfig{VCPUCount: 2, MemSizeMiB: 256})
		}, "PUT", "/machine-config", map[string]any{"vcpu_count": 2.0, "mem_size_mib": 256.0}},
		{"boot source", func() error {
			return c.PutBootSource(ctx, BootSource{KernelImagePath: p("vmlinux"), InitrdPath: p("initrd"), BootArgs: "console=ttyS0 -- guest vm-init"})
		}, "PUT", "/boot-source", map[string]any{"kernel_image_path": p("vmlinux"), "initrd_path": p("initrd"), "boot_args": "console=ttyS0 -- guest vm-init"}},
		{"root drive, read-only", func() error {
			return c.PutDrive(ctx, Drive{DriveID: "root", PathOnHost: p("root.img"), IsRootDevice: true, IsReadOnly: true})
		}, "PUT", "/drives/root", map[string]any{"drive_id": "root", "path_on_host": p("root.img"), "is_root_device": true, "is_read_only": true}},
		{"scratch drive, writable", func() error {
			return c.PutDrive(ctx, Drive{DriveID: "scratch", PathOnHost: p("scratch.img")})
		}, "PUT", "/drives/scratch", map[string]any{"drive_id": "scratch", "path_on_host": p("scratch.img"), "is_root_device": false, "is_read_only": false}},
		{"network interface", func() error {
			return c.PutNetworkInterface(ctx, NetworkInterface{IfaceID: "eth0", HostDevName: "dxtap0", GuestMAC: "06:00:ac:10:00:02"})
		}, "PUT", "/network-interfaces/eth0", map[string]any{"iface_id": "eth0", "host_dev_name": "dxtap0", "guest_mac": "06:00:ac:10:00:02"}},
		{"vsock", func() error {
			return c.PutVsock(ctx, Vsock{GuestCID: 3, UDSPath: p("v.sock")})
		}, "PUT", "/vsock", map[string]any{"guest_cid": 3.0, "uds_path": p("v.sock")}},
		{"start", func() error { return c.InstanceStart(ctx) }, "PUT", "/actions", map[string]any{"action_type": "InstanceStart"}},
		{"info", func() error {
			info, err := c.InstanceInfo(ctx)
			if err == nil && (info.State != InstanceRunning || info.ID != "vm-1" || info.AppName != "Firecracker") {
				t.Errorf("InstanceInfo = %+v", info)
			}
			return err
		}, "GET", "/", nil},
		{"pause", func() error { return c.Pause(ctx) }, "PATCH", "/vm", map[string]any{"state": "Paused"}},
		{"snapshot", func() error {
			return c.CreateSnapshot(ctx, SnapshotCreate{SnapshotType: SnapshotFull, SnapshotPath: p("vm.snap"), MemFilePath: p("vm.mem")})
		}, "PUT", "/snapshot/create", map[string]any{"snapshot_type": "Full", "snapshot_path": p("vm.snap"), "mem_file_path": p("vm.mem")}},
		{"resume", func() error { return c.Resume(ctx) }, "PATCH", "/vm", map[string]any{"state": "Resumed"}},
		{"ctrl-alt-del", func() error { return c.SendCtrlAltDel(ctx) }, "PUT", "/actions", map[string]any{"action_type": "SendCtrlAltDel"}},
	} {
		n := len(s.Calls())
		if err := tc.call(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		calls := s.Calls()[n:]
		if len(calls) != 1 {
			t.Fatalf("%s: %d requests, want 1", tc.name, len(calls))
		}
		got := calls[0]
		if got.Method != tc.method || got.Path != tc.path || !reflect.DeepEqual(got.Body, tc.body) {
			t.Errorf("%s: sent %s %s %v, want %s %s %v", tc.name, got.Method, got.Path, got.Body, tc.method, tc.path, tc.body)
		}
	}
	noViolations(t, s.Calls())
	select {
	case <-s.Exited():
	default:
		t.Error("the fake VM did not shut down after SendCtrlAltDel")
	}

	// A snapshot loads into a fresh process only.
	s2, c2 := newFake(t, shortDir(t))
	err := c2.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: p("vm.snap"), MemBackend: &MemoryBackend{BackendType: "File", BackendPath: p("vm.mem")}, ResumeVM: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"snapshot_path": p("vm.snap"), "mem_backend": map[string]any{"backend_type": "File", "backend_path": p("vm.mem")}, "resume_vm": true}
	if got := s2.Calls()[0]; got.Method != "PUT" || got.Path != "/snapshot/load" || !reflect.DeepEqual(got.Body, want) {
		t.Errorf("load sent %s %s %v, want PUT /snapshot/load %v", got.Method, got.Path, got.Body, want)
	}
	if st := s2.State(); st != InstanceRunning {
		t.Errorf("after a load with resume_vm the state is %q", st)
	}
	noViolations(t, s2.Calls())
}

// TestOrderRules: what Firecracker refuses for its order comes back as an
// *APIError with its fault_message (here, the fake's, in Firecracker's
// words).
func TestOrderRules(t *testing.T) {
	ctx := context.Background()
	type client = *Client
	boot := func(c client, dir string) error {
		return c.PutBootSource(ctx, BootSource{KernelImagePath: filepath.Join(dir, "vmlinux")})
	}
	start := func(c client, dir string) error { return c.InstanceStart(ctx) }
	pause := func(c client, dir string) error { return c.Pause(ctx) }
	for _, tc := range []struct {
		name  string
		steps []func(client, string) error
		call  func(client, string) error
		fault string
	}{
		{"boot source after the start", []func(client, string) error{boot, start}, boot, "not supported after starting"},
		{"machine config after the start", []func(client, string) error{boot, start}, func(c client, _ string) error {
			return c.PutMachineConfig(ctx, MachineConfig{VCPUCount: 1, MemSizeMiB: 128})
		}, "not supported after starting"},
		{"drive after the start", []func(client, string) error{boot, start}, func(c client, dir string) error {
			return c.PutDrive(ctx, Drive{DriveID: "scratch", PathOnHost: filepath.Join(dir, "scratch.img")})
		}, "not supported after starting"},
		{"vsock after the start", []func(client, string) error{boot, start}, func(c client, dir string) error {
			return c.PutVsock(ctx, Vsock{GuestCID: 3, UDSPath: filepath.Join(dir, "v.sock")})
		}, "not supported after starting"},
		{"start without a kernel", nil, start, "without kernel configuration"},
		{"start twice", []func(client, string) error{boot, start}, start, "not supported after starting"},
		{"pause before the start", []func(client, string) error{boot}, pause, "not supported before starting"},
		{"ctrl-alt-del before the start", nil, func(c client, _ string) error { return c.SendCtrlAltDel(ctx) }, "not supported before starting"},
		{"snapshot before the start", []func(client, string) error{boot}, snapshot(SnapshotFull), "not supported before starting"},
		{"snapshot while running", []func(client, string) error{boot, start}, snapshot(SnapshotFull), "unavailable while running"},
		{"diff snapshot without dirty tracking", []func(client, string) error{boot, start, pause}, snapshot(SnapshotDiff), "dirty page tracking disabled"},
		{"load after a configuration", []func(client, string) error{func(c client, _ string) error {
			return c.PutMachineConfig(ctx, MachineConfig{VCPUCount: 1, MemSizeMiB: 128})
		}}, load, "not allowed after configuring boot-specific resources"},
		{"load after a refused configuration", []func(client, string) error{func(c client, dir string) error {
			if err := c.PutBootSource(ctx, BootSource{KernelImagePath: filepath.Join(dir, "missing")}); err == nil {
				return errors.New("a missing kernel was accepted")
			}
			return nil
		}}, load, "not allowed after configuring boot-specific resources"},
		{"load after the start", []func(client, string) error{boot, start}, load, "not supported after starting"},
		{"a second root drive", []func(client, string) error{func(c client, dir string) error {
			return c.PutDrive(ctx, Drive{DriveID: "root", PathOnHost: filepath.Join(dir, "root.img"), IsRootDevice: true})
		}}, func(c client, dir string) error {
			return c.PutDrive(ctx, Drive{DriveID: "root2", PathOnHost: filepath.Join(dir, "scratch.img"), IsRootDevice: true})
		}, "root block device already exists"},
		{"a missing drive file", nil, func(c client, dir string) error {
			return c.PutDrive(ctx, Drive{DriveID: "scratch", PathOnHost: filepath.Join(dir, "nope.img")})
		}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			s, c := newFake(t, dir)
			for i, step := range tc.steps {
				if err := step(c, dir); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
			err := tc.call(c, dir)
			var apiErr *APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("got %v, want an *APIError", err)
			}
			if apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.FaultMessage, tc.fault) {
				t.Errorf("got %d %q, want 400 with %q", apiErr.Status, apiErr.FaultMessage, tc.fault)
			}
			if !strings.Contains(err.Error(), apiErr.FaultMessage) {
				t.Errorf("the error %q does not carry the fault message", err)
			}
			if calls := s.Calls(); !calls[len(calls)-1].Violation {
				t.Errorf("the fake did not count the refused request as a violation")
			}
		})
	}
}

func snapshot(typ string) func(*Client, string) error {
	return func(c *Client, dir string) error {
		return c.CreateSnapshot(context.Background(), SnapshotCreate{SnapshotType: typ,
			SnapshotPath: filepath.Join(dir, "s"), MemFilePath: filepath.Join(dir, "m")})
	}
}

func load(c *Client, dir string) error {
	return c.LoadSnapshot(context.Background(), SnapshotLoad{SnapshotPath: filepath.Join(dir, "s"),
		MemBackend: &MemoryBackend{BackendType: "File", BackendPath: filepath.Join(dir, "m")}})
}

// rawClient is plain HTTP on a unix socket, for requests the typed
// client would never send.
func rawClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// TestFakeChecksBodies: the fake refuses what the spec does not allow, so
// that a client bug cannot pass the other tests unseen.
func TestFakeChecksBodies(t *testing.T) {
	for _, tc := range []struct {
		name, method, path, body string
		chunked                  bool
		contentType              string
		fault                    string
	}{
		{"unknown field", "PUT", "/machine-config", `{"vcpu_count":1,"mem_size_mib":128,"vcpus":1}`, false, "", "unknown field `vcpus`"},
		{"missing required field", "PUT", "/machine-config", `{"vcpu_count":1}`, false, "", "missing field `mem_size_mib`"},
		{"wrong type", "PUT", "/machine-config", `{"vcpu_count":"1","mem_size_mib":128}`, false, "", "invalid type for `vcpu_count`"},
		{"a fraction for an integer", "PUT", "/machine-config", `{"vcpu_count":1.5,"mem_size_mib":128}`, false, "", "invalid type"},
		{"too many vCPUs", "PUT", "/machine-config", `{"vcpu_count":33,"mem_size_mib":128}`, false, "", "out of range"},
		{"a reserved CID", "PUT", "/vsock", `{"guest_cid":2,"uds_path":"/x"}`, false, "", "out of range"},
		{"an unknown enum value", "PUT", "/actions", `{"action_type":"Reboot"}`, false, "", "unknown variant `Reboot`"},
		{"drive id differs from the path", "PUT", "/drives/a", `{"drive_id":"b","is_root_device":false,"is_read_only":false,"path_on_host":"/dev/null"}`, false, "", "does not match"},
		{"nested: a memory backend without its path", "PUT", "/snapshot/load", `{"snapshot_path":"/x","mem_backend":{"backend_type":"File"}}`, false, "", "missing field `backend_path`"},
		{"both memory sources", "PUT", "/snapshot/load", `{"snapshot_path":"/x","mem_file_path":"/y","mem_backend":{"backend_type":"File","backend_path":"/y"}}`, false, "", "exactly one"},
		{"not an object", "PUT", "/boot-source", `["x"]`, false, "", "deserializing"},
		{"a chunked body", "PUT", "/boot-source", `{"kernel_image_path":"/dev/null"}`, true, "", "Chunked"},
		{"no content type", "PUT", "/boot-source", `{"kernel_image_path":"/dev/null"}`, false, "-", "Content-Type"},
		{"an unknown path", "PUT", "/vm/pause", `{}`, false, "", "Invalid request method and/or path"},
		{"a wrong method", "POST", "/actions", `{"action_type":"InstanceStart"}`, false, "", "Invalid request method and/or path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newFake(t, shortDir(t))
			var body io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				// Hidden from net/http's length sniffing: it sends it chunked.
				body = io.MultiReader(body)
			}
			req, _ := http.NewRequest(tc.method, "http://localhost"+tc.path, body)
			if tc.contentType != "-" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := rawClient(s.Socket()).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 || !strings.Contains(string(raw), tc.fault) {
				t.Errorf("got %d %s, want 400 with %q", resp.StatusCode, raw, tc.fault)
			}
			if v := s.Violations(); len(v) != 1 {
				t.Errorf("%d violations recorded, want 1", len(v))
			}
		})
	}
}

// TestAPIErrors: whatever a refusal looks like, it is an *APIError, with
// the fault_message when there is one.
func TestAPIErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		fault  string
	}{
		{"fault message", 400, `{"fault_message":"Machine config error: Invalid vCPU count."}`, "Machine config error: Invalid vCPU count."},
		{"internal error without JSON", 500, "boom", ""},
		{"200 instead of 204", 200, `{}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(shortDir(t), "api.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})}
			go srv.Serve(ln)
			defer srv.Close()
			err = NewClient(sock).PutMachineConfig(context.Background(), MachineConfig{VCPUCount: 1, MemSizeMiB: 128})
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Status != tc.status || apiErr.FaultMessage != tc.fault {
				t.Fatalf("got %#v (%v), want an *APIError %d %q", apiErr, err, tc.status, tc.fault)
			}
			if apiErr.Method != "PUT" || apiErr.Path != "/machine-config" {
				t.Errorf("the error names %s %s", apiErr.Method, apiErr.Path)
			}
		})
	}
}

// TestCallDeadline: a VMM that takes the request and never answers does
// not hang the caller: the ctx's deadline, else CallTimeout, ends the
// call.
func TestCallDeadline(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ctxDeadline bool
	}{{"ctx deadline", true}, {"call timeout", false}} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(shortDir(t), "api.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() { io.Copy(io.Discard, c); c.Close() }()
				}
			}()
			c := NewClient(sock)
			ctx := context.Background()
			if tc.ctxDeadline {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
			} else {
				c.CallTimeout = 200 * time.Millisecond
			}
			start := time.Now()
			err = c.InstanceStart(ctx)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v, want the deadline", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the call took %v", d)
			}
		})
	}
}
