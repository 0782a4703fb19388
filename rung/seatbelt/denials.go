//go:build linux || darwin

package seatbelt

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim"
)

// How the rung learns what Seatbelt denied: the kernel reports each denial
// to the unified log ("Sandbox: cat(4242) deny(1) file-read-data /Users/a/
// .ssh/id_rsa"), which `log stream --style ndjson` delivers as it happens.
// The log is asynchronous, so the trial orders it with markers, never a
// wait: before the command runs, a process of dryexec's own is denied a
// read of a marker file in the trial's scratch dir, and the command starts
// only once that denial is in the stream; after the command, a second
// marker, and the stream is read up to it. A read of a masked path becomes
// a {kind: secret} violation, as on ns, and a direct connection (one that
// ignored the proxy) a blocked network event.
//
// The stream holds every sandboxed process's denials, not this trial's
// alone: those on a clone path are the trial's own (the scratch dir is the
// trial's), but one on a host path (~/.ssh) made by another Seatbelt
// sandbox between the markers would be counted here too.

// markWait bounds the wait for a marker: a log that does not deliver it
// (reporting off, `log` failing) costs a warning, not a hung trial.
const markWait = 10 * time.Second

// denial is one operation Seatbelt refused.
type denial struct {
	Proc   string // the process's name
	PID    int
	Op     string // file-read-data, network-outbound, ...
	Target string // a path, or an address and port
}

// denialLine is the kernel's report inside an event's message.
var denialLine = regexp.MustCompile(`^Sandbox: (.+)\((\d+)\) deny\(\d+\) (\S+) (.+)$`)

// parseDenial reads one line of `log stream --style ndjson`: a denial, or
// false for anything else (the stream's other events, a partial line).
func parseDenial(line []byte) (denial, bool) {
	var ev struct {
		EventMessage string `json:"eventMessage"`
	}
	if json.Unmarshal(line, &ev) != nil {
		return denial{}, false
	}
	m := denialLine.FindStringSubmatch(strings.TrimSpace(ev.EventMessage))
	if m == nil {
		return denial{}, false
	}
	pid, err := strconv.Atoi(m[2])
	if err != nil {
		return denial{}, false
	}
	return denial{Proc: m[1], PID: pid, Op: m[3], Target: m[4]}, true
}

// denialLog collects the denials of one stream, and tells a waiter when a
// given marker's has arrived.
type denialLog struct {
	scratch string
	// mark makes a process be denied a read of path (macOS: sandbox-exec
	// with a profile denying it, running cat).
	mark func(ctx context.Context, path string) error
	// end stops the stream (kills `log stream`); the reader then ends.
	end   func()
	ended chan struct{}

	mu    sync.Mutex
	got   []denial
	waits map[string]chan struct{}
}

// newDenialLog reads r's lines until it ends, then closes it.
func newDenialLog(r io.ReadCloser, scratch string, mark func(context.Context, string) error, end func()) *denialLog {
	l := &denialLog{scratch: scratch, mark: mark, end: end, ended: make(chan struct{}), waits: map[string]chan struct{}{}}
	go func() {
		defer close(l.ended)
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			d, ok := parseDenial(sc.Bytes())
			if !ok {
				continue
			}
			l.mu.Lock()
			if ch, ok := l.waits[d.Target]; ok {
				close(ch)
				delete(l.waits, d.Target)
			} else if !strings.HasPrefix(d.Target, filepath.Join(scratch, "mark-")) {
				l.got = append(l.got, d)
			}
			l.mu.Unlock()
		}
		io.Copy(io.Discard, r)
	}()
	return l
}

// markAndWait has a marker denied and waits until the stream shows it:
// every denial before the marker's is then in l.got.
func (l *denialLog) markAndWait(ctx context.Context, name string) error {
	path := filepath.Join(l.scratch, name)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return err
	}
	seen := make(chan struct{})
	l.mu.Lock()
	l.waits[path] = seen
	l.mu.Unlock()
	if err := l.mark(ctx, path); err != nil {
		return fmt.Errorf("making the marker denial: %w", err)
	}
	t := time.NewTimer(markWait)
	defer t.Stop()
	select {
	case <-seen:
		return nil
	case <-l.ended:
		return fmt.Errorf("the log stream ended before the marker %s", name)
	case <-t.C:
		return fmt.Errorf("the marker %s was not in the log within %v", name, markWait)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop reads the stream up to an end marker, ends it and returns what it
// held, with a warning when the end marker never came (some denials may be
// missing).
func (l *denialLog) stop(ctx context.Context) ([]denial, string) {
	var warn string
	if err := l.markAndWait(ctx, "mark-end"); err != nil {
		warn = "seatbelt: Seatbelt's denials after the command may be missing (masked reads, direct connections): " + err.Error()
	}
	l.close()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.got, warn
}

// close ends the stream and waits for its reader; nil is a no-op.
func (l *denialLog) close() {
	if l == nil {
		return
	}
	l.end()
	<-l.ended
}

// violations are the {kind: secret} violations among denied: a read or
// write of a masked path (the clone's copy named by its original, through
// orig), once per path, as the ns rung reports them.
func (p Profile) violations(denied []denial, orig func(string) string) []dryexec.Violation {
	var out []dryexec.Violation
	seen := map[string]bool{}
	for _, d := range denied {
		if !strings.HasPrefix(d.Op, "file-") || !filepath.IsAbs(d.Target) {
			continue
		}
		for _, m := range p.Masked {
			if !under(d.Target, m) {
				continue
			}
			path := orig(d.Target)
			if !seen[path] {
				seen[path] = true
				out = append(out, dryexec.Violation{Kind: dryexec.ViolationSecret, Detail: path, PID: d.PID, Exe: d.Proc})
			}
			break
		}
	}
	return out
}

// networkEvents are the direct connections among denied (a client that
// ignored the proxy variables), logged as netsim logs a refused
// connection. Seatbelt's report does not say TCP or UDP; a unix socket is
// not network traffic here, as on ns.
func (p Profile) networkEvents(denied []denial) []dryexec.NetworkEvent {
	var out []dryexec.NetworkEvent
	for _, d := range denied {
		if !strings.HasPrefix(d.Op, "network-") {
			continue
		}
		ap, err := netip.ParseAddrPort(strings.TrimPrefix(d.Target, "*:"))
		if err != nil {
			continue
		}
		out = append(out, dryexec.NetworkEvent{Proto: "tcp", Host: ap.Addr().Unmap().String(), Port: int(ap.Port()), Action: netsim.ActionBlocked,
			Reason: fmt.Sprintf("denied by Seatbelt (%s by %s, not through netsim's proxy; TCP or UDP)", d.Op, d.Proc)})
	}
	return out
}
