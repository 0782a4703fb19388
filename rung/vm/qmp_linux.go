package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// qmp is a client of QEMU's machine protocol (QMP) on the host's end of a
// socketpair whose other end QEMU has as `-chardev socket,fd=N -mon
// mode=control`: one command at a time, events skipped. Parking uses it to
// stop the VM and save its state, resuming to let a restored one run.
type qmp struct {
	c  *net.UnixConn
	rd *bufio.Reader
}

// QMPError is a command QEMU refused: its class and description.
type QMPError struct {
	Command, Class, Desc string
}

func (e *QMPError) Error() string {
	return fmt.Sprintf("QEMU refused %s: %s (%s)", e.Command, e.Desc, e.Class)
}

// qmpArgs are QEMU's arguments for a monitor on fd (in QEMU's process).
func qmpArgs(fd int) []string {
	return []string{"-chardev", "socket,id=qmp,fd=" + strconv.Itoa(fd), "-mon", "chardev=qmp,mode=control"}
}

// dialQMP takes the host's end f (it is the client's from then on), reads
// QEMU's greeting and leaves negotiation mode, all before ctx's deadline.
func dialQMP(ctx context.Context, f *os.File) (*qmp, error) {
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	q := &qmp{c: fc.(*net.UnixConn), rd: bufio.NewReader(fc)}
	stop := q.deadline(ctx)
	defer stop()
	var greet struct {
		QMP json.RawMessage `json:"QMP"`
	}
	line, err := q.rd.ReadBytes('\n')
	if err != nil {
		q.c.Close()
		return nil, fmt.Errorf("QMP greeting: %w", err)
	}
	if json.Unmarshal(line, &greet) != nil || greet.QMP == nil {
		q.c.Close()
		return nil, fmt.Errorf("QMP greeting: unexpected %q", line)
	}
	if _, err := q.exec(ctx, "qmp_capabilities", nil, nil); err != nil {
		q.c.Close()
		return nil, err
	}
	return q, nil
}

// deadline makes ctx's deadline the connection's, and its cancellation
// an immediate one; stop undoes both.
func (q *qmp) deadline(ctx context.Context) (stop func()) {
	if d, ok := ctx.Deadline(); ok {
		q.c.SetDeadline(d)
	}
	after := context.AfterFunc(ctx, func() { q.c.SetDeadline(time.Unix(1, 0)) })
	return func() {
		after()
		q.c.SetDeadline(time.Time{})
	}
}

// exec runs one command (with a descriptor passed along, if fd is not
// nil) and decodes its return value into ret (if not nil).
func (q *qmp) exec(ctx context.Context, cmd string, args any, ret any, fd ...*os.File) (json.RawMessage, error) {
	stop := q.deadline(ctx)
	defer stop()
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var oob []byte
	if len(fd) > 0 {
		oob = unix.UnixRights(int(fd[0].Fd()))
	}
	if _, _, err := q.c.WriteMsgUnix(append(b, '\n'), oob, nil); err != nil {
		return nil, fmt.Errorf("QMP %s: %w", cmd, err)
	}
	for {
		line, err := q.rd.ReadBytes('\n')
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("QMP %s: %w", cmd, context.Cause(ctx))
			}
			return nil, fmt.Errorf("QMP %s: %w", cmd, err)
		}
		var resp struct {
			Event  string          `json:"event"`
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			return nil, fmt.Errorf("QMP %s: %w", cmd, err)
		}
		switch {
		case resp.Event != "":
			continue
		case resp.Error != nil:
			return nil, &QMPError{Command: cmd, Class: resp.Error.Class, Desc: resp.Error.Desc}
		}
		if ret != nil {
			if err := json.Unmarshal(resp.Return, ret); err != nil {
				return nil, fmt.Errorf("QMP %s: %w", cmd, err)
			}
		}
		return resp.Return, nil
	}
}

// status is the VM's run state (query-status): "running", "paused",
// "inmigrate", "postmigrate", …
func (q *qmp) status(ctx context.Context) (string, error) {
	var st struct {
		Status string `json:"status"`
	}
	_, err := q.exec(ctx, "query-status", nil, &st)
	return st.Status, err
}

// errMigration: the VM's state was not saved or not restored.
var errMigration = errors.New("migration failed")

// saveTo stops the VM and writes its whole state to f (QEMU 7.2 has no
// file: migration; an fd: one on a regular file is the same stream), then
// waits for the migration to complete. QEMU refuses at once, with its
// reason, while a blocker stands (a 9p export still attached).
func (q *qmp) saveTo(ctx context.Context, f *os.File) error {
	if _, err := q.exec(ctx, "stop", nil, nil); err != nil {
		return err
	}
	if _, err := q.exec(ctx, "getfd", map[string]string{"fdname": "park"}, nil, f); err != nil {
		return err
	}
	if _, err := q.exec(ctx, "migrate", map[string]string{"uri": "fd:park"}, nil); err != nil {
		return err
	}
	return q.waitMigration(ctx, "query-migrate")
}

// waitMigration polls cmd (query-migrate) until the migration is over:
// QEMU's events for it are opt-in (migrate-set-capabilities events), and a
// poll also covers a migration that ended before we asked.
func (q *qmp) waitMigration(ctx context.Context, cmd string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if _, err := q.exec(ctx, cmd, nil, &st); err != nil {
			return err
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("%w: %s %s", errMigration, st.Status, st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("saving the VM: %w", context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// waitIncoming waits until a VM started with -incoming has taken its whole
// state (it is then paused: it was stopped when saved) and, if run, lets
// it run.
func (q *qmp) waitIncoming(ctx context.Context, run bool) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := q.status(ctx)
		if err != nil {
			return err
		}
		switch st {
		case "inmigrate":
		case "paused", "prelaunch", "postmigrate":
			if !run {
				return nil
			}
			_, err := q.exec(ctx, "cont", nil, nil)
			return err
		case "running":
			return nil
		default:
			return fmt.Errorf("%w: the restored VM is %s", errMigration, st)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("restoring the VM: %w", context.Cause(ctx))
		case <-tick.C:
		}
	}
}

func (q *qmp) Close() error { return q.c.Close() }
