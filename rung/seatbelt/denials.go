//go:build linux || darwin

package seatbelt

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
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
//
// Whose denial it is: the log holds every Seatbelt sandbox's, this trial's
// and any other's running at the same time (another trial, another tool's
// sandbox-exec, an app's). Every deny rule of a trial's profile carries
// (with message TAG), TAG a random name of the trial's own (Profile.Tag),
// and the kernel appends the rule's message to its report: the event's
// message is the denial's line, a newline, and TAG. The stream is asked for
// messages that end with TAG, and each line read is checked for it again,
// so a denial is counted only by the trial whose profile denied it: never
// by pid (a pid is reused, and a process's children are not known here)
// nor by path (two trials may both be denied ~/.ssh). A command cannot
// forge another trial's denials: it does not know that trial's tag.
//
// The log is asynchronous, so the reader orders it with markers, never a
// wait: a process of dryexec's own, under a profile with the same tag, is
// denied a read of a marker file of a random name in a directory the
// command's profile hides, and the reader waits until that denial is in
// the stream: every denial the command was refused before then is read.
// A trial marks before its command runs and after it ends; a session
// before each exec reads its network log and after (sessionNet). A read of
// a masked path becomes a {kind: secret} violation, as on ns, and a direct
// connection (one that ignored the proxy) a blocked network event.

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

// denialLine is the kernel's report inside an event's message, the tag
// taken off. (?s): a process's name (its executable's) may hold a newline,
// and its denial must still be read.
var denialLine = regexp.MustCompile(`(?s)^Sandbox: (.+)\((\d+)\) deny\(\d+\) (\S+) (.+)$`)

// parseDenial reads one line of `log stream --style ndjson`: a denial made
// under a profile tagged tag, or false for anything else (another
// sandbox's denial, the stream's other events, a partial line).
func parseDenial(line []byte, tag string) (denial, bool) {
	var ev struct {
		EventMessage string `json:"eventMessage"`
	}
	if tag == "" || json.Unmarshal(line, &ev) != nil {
		return denial{}, false
	}
	msg, ok := strings.CutSuffix(strings.TrimSpace(ev.EventMessage), tag)
	if !ok || !strings.HasSuffix(msg, "\n") && !strings.HasSuffix(msg, " ") {
		// Not this profile's message: another sandbox's tag, or one
		// that merely ends with this one's.
		return denial{}, false
	}
	m := denialLine.FindStringSubmatch(strings.TrimSpace(msg))
	if m == nil {
		return denial{}, false
	}
	pid, err := strconv.Atoi(m[2])
	if err != nil {
		return denial{}, false
	}
	return denial{Proc: m[1], PID: pid, Op: m[3], Target: m[4]}, true
}

// denialLog collects the denials of one stream under one tag, and tells a
// waiter when a given marker's has arrived.
type denialLog struct {
	tag string
	// marks is the directory of the marker files: the command's profile
	// hides it (Profile.Hidden), so the command can neither list a
	// marker's name nor be denied it in the marker's place.
	marks string
	// mark makes a process be denied a read of path under a profile
	// tagged tag (macOS: sandbox-exec running cat).
	mark func(ctx context.Context, path string) error
	// end stops the stream (kills `log stream`); the reader then ends.
	end   func()
	ended chan struct{}

	mu    sync.Mutex
	got   []denial
	waits map[string]chan struct{}
}

// newDenialLog reads r's lines until it ends, then closes it.
func newDenialLog(r io.ReadCloser, tag, marks string, mark func(context.Context, string) error, end func()) *denialLog {
	l := &denialLog{tag: tag, marks: marks, mark: mark, end: end, ended: make(chan struct{}), waits: map[string]chan struct{}{}}
	go func() {
		defer close(l.ended)
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			d, ok := parseDenial(sc.Bytes(), tag)
			if !ok {
				continue
			}
			l.mu.Lock()
			if ch, ok := l.waits[d.Target]; ok && d.Op == "file-read-data" {
				close(ch)
				delete(l.waits, d.Target)
			} else if !under(d.Target, marks) {
				l.got = append(l.got, d)
			}
			l.mu.Unlock()
		}
		io.Copy(io.Discard, r)
	}()
	return l
}

// markAndWait has a marker denied and waits until the stream shows it:
// every denial before the marker's is then in l.got. The marker's name is
// name and a random part: one the command cannot guess.
func (l *denialLog) markAndWait(ctx context.Context, name string) error {
	rnd := make([]byte, 8)
	if _, err := rand.Read(rnd); err != nil {
		return err
	}
	path := filepath.Join(l.marks, name+"-"+hex.EncodeToString(rnd))
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return err
	}
	defer os.Remove(path)
	seen := make(chan struct{})
	l.mu.Lock()
	l.waits[path] = seen
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.waits, path)
		l.mu.Unlock()
	}()
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

// take reads the stream up to a new marker and returns the denials read
// since the last take: with an error when the marker never came (some
// denials may come later, or never).
func (l *denialLog) take(ctx context.Context) ([]denial, error) {
	err := l.markAndWait(ctx, "mark")
	l.mu.Lock()
	defer l.mu.Unlock()
	got := l.got
	l.got = nil
	return got, err
}

// stop reads the stream up to an end marker, ends it and returns what it
// held, with a warning when the end marker never came (some denials may be
// missing).
func (l *denialLog) stop(ctx context.Context) ([]denial, string) {
	got, err := l.take(ctx)
	var warn string
	if err != nil {
		warn = missingWarning(err)
	}
	l.close()
	return got, warn
}

// missingWarning is what a delta says when the denials it holds may not be
// all of them.
func missingWarning(err error) string {
	return "seatbelt: Seatbelt's denials after the command may be missing (masked reads, direct connections): " + err.Error()
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
