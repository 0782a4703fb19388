package firecracker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// DefaultCallTimeout bounds an API call whose context has no deadline: no
// call may hang on a VMM that stopped answering. Snapshots of a large
// guest take longer; their callers pass a deadline of their own.
const DefaultCallTimeout = 30 * time.Second

// maxBody bounds what is read of an answer: Firecracker's are small JSON
// objects.
const maxBody = 1 << 20

// Client speaks Firecracker's REST API over its unix socket. Safe for
// concurrent use, though Firecracker handles one request at a time.
type Client struct {
	sock string
	hc   *http.Client
	// CallTimeout bounds each call whose context has no deadline; 0:
	// DefaultCallTimeout.
	CallTimeout time.Duration
}

// NewClient returns a client for the API socket at sock. It connects on
// the first call.
func NewClient(sock string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		// One VMM, one socket: a kept connection is all there is to reuse.
		MaxIdleConns:    1,
		IdleConnTimeout: 30 * time.Second,
	}
	return &Client{sock: sock, hc: &http.Client{Transport: tr}}
}

// Socket is the API socket's path.
func (c *Client) Socket() string { return c.sock }

// Close drops the client's idle connection.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// do sends one request and checks its status: want on success, else an
// *APIError carrying the fault_message.
func (c *Client) do(ctx context.Context, method, path string, body any, want int, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmp.Or(c.CallTimeout, DefaultCallTimeout))
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("firecracker: %s %s: %w", method, path, err)
		}
		// A bytes.Reader gives the request a Content-Length: Firecracker's
		// HTTP server takes no chunked bodies.
		rd = bytes.NewReader(b)
	}
	// The host part is never resolved (the dialer ignores it); "localhost"
	// is what the spec's host says.
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, rd)
	if err != nil {
		return fmt.Errorf("firecracker: %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("firecracker: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("firecracker: %s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode != want {
		e := &APIError{Method: method, Path: path, Status: resp.StatusCode}
		var f apiFault
		if json.Unmarshal(raw, &f) == nil {
			e.FaultMessage = f.FaultMessage
		}
		return e
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("firecracker: %s %s: decoding the answer: %w", method, path, err)
		}
	}
	return nil
}

func (c *Client) put(ctx context.Context, path string, body any) error {
	return c.do(ctx, http.MethodPut, path, body, http.StatusNoContent, nil)
}

// PutMachineConfig sets the vCPUs and memory. Before InstanceStart only.
func (c *Client) PutMachineConfig(ctx context.Context, m MachineConfig) error {
	return c.put(ctx, "/machine-config", m)
}

// PutBootSource sets the kernel, initrd and kernel command line. Before
// InstanceStart only.
func (c *Client) PutBootSource(ctx context.Context, b BootSource) error {
	return c.put(ctx, "/boot-source", b)
}

// PutDrive adds or replaces the drive d.DriveID. Before InstanceStart only.
func (c *Client) PutDrive(ctx context.Context, d Drive) error {
	if err := checkID("drive", d.DriveID); err != nil {
		return err
	}
	return c.put(ctx, "/drives/"+d.DriveID, d)
}

// PutVsock adds the vsock device. Before InstanceStart only.
func (c *Client) PutVsock(ctx context.Context, v Vsock) error {
	return c.put(ctx, "/vsock", v)
}

// PutNetworkInterface adds the interface n.IfaceID. Before InstanceStart
// only.
func (c *Client) PutNetworkInterface(ctx context.Context, n NetworkInterface) error {
	if err := checkID("network interface", n.IfaceID); err != nil {
		return err
	}
	return c.put(ctx, "/network-interfaces/"+n.IfaceID, n)
}

// InstanceStart boots the configured VM.
func (c *Client) InstanceStart(ctx context.Context) error {
	return c.put(ctx, "/actions", instanceAction{ActionType: ActionInstanceStart})
}

// SendCtrlAltDel asks the guest to shut down (x86's keyboard controller
// reset; a guest without an i8042 driver ignores it).
func (c *Client) SendCtrlAltDel(ctx context.Context) error {
	return c.put(ctx, "/actions", instanceAction{ActionType: ActionSendCtrlAltDel})
}

// Pause stops the vCPUs. After InstanceStart only.
func (c *Client) Pause(ctx context.Context) error {
	return c.do(ctx, http.MethodPatch, "/vm", vmState{State: StatePaused}, http.StatusNoContent, nil)
}

// Resume restarts paused vCPUs.
func (c *Client) Resume(ctx context.Context) error {
	return c.do(ctx, http.MethodPatch, "/vm", vmState{State: StateResumed}, http.StatusNoContent, nil)
}

// CreateSnapshot writes the VM's state and memory. While paused only.
func (c *Client) CreateSnapshot(ctx context.Context, s SnapshotCreate) error {
	return c.put(ctx, "/snapshot/create", s)
}

// LoadSnapshot restores a snapshot into this (fresh) process.
func (c *Client) LoadSnapshot(ctx context.Context, s SnapshotLoad) error {
	return c.put(ctx, "/snapshot/load", s)
}

// InstanceInfo is GET /: the instance's id, state and VMM version.
func (c *Client) InstanceInfo(ctx context.Context) (InstanceInfo, error) {
	var info InstanceInfo
	err := c.do(ctx, http.MethodGet, "/", nil, http.StatusOK, &info)
	return info, err
}

// errBadID: an id Firecracker would refuse, or one that would change the
// request's path.
var errBadID = errors.New("ids are 1-64 of [A-Za-z0-9_]")

// checkID keeps a device id to what Firecracker accepts as one
// (alphanumerics and underscores), which also keeps it from changing the
// request's path.
func checkID(kind, id string) error {
	ok := id != "" && len(id) <= 64
	for _, r := range id {
		ok = ok && (r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}
	if !ok {
		return fmt.Errorf("firecracker: %s id %q: %w", kind, id, errBadID)
	}
	return nil
}
