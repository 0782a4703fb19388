//go:build linux || darwin

package seatbelt

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dryexec/dryexec"
)

// logLine is one line of `log stream --style ndjson` holding the kernel's
// report msg of a denial by a rule tagged tag (its message on a line of its
// own after the report's; none when tag is "").
func logLine(msg, tag string) string {
	if tag != "" {
		msg += "\n" + tag
	}
	b, _ := json.Marshal(map[string]any{"eventMessage": msg, "processImagePath": "/kernel", "processID": 0, "messageType": "Error",
		"senderImagePath": "/System/Library/Extensions/Sandbox.kext/Contents/MacOS/Sandbox", "timestamp": "2026-12-05 07:30:00.000000+0000"})
	return string(b) + "\n"
}

const testTag = "dryexec-0123456789abcdef01234567"

func TestParseDenial(t *testing.T) {
	for _, c := range []struct {
		line string
		want denial
		ok   bool
	}{
		{logLine("Sandbox: cat(4242) deny(1) file-read-data /Users/a/.ssh/id_rsa", testTag), denial{"cat", 4242, "file-read-data", "/Users/a/.ssh/id_rsa"}, true},
		{logLine("Sandbox: Python Helper (x)(7) deny(1) file-read-data /Users/a/my secrets/k", testTag), denial{"Python Helper (x)", 7, "file-read-data", "/Users/a/my secrets/k"}, true},
		{logLine("Sandbox: curl(9) deny(1) network-outbound 93.184.216.34:443", testTag), denial{"curl", 9, "network-outbound", "93.184.216.34:443"}, true},
		// A process whose executable's name holds a newline is still read.
		{logLine("Sandbox: a\nb(8) deny(1) file-read-data /Users/a/.netrc", testTag), denial{"a\nb", 8, "file-read-data", "/Users/a/.netrc"}, true},
		// The tag after a space rather than a newline.
		{logLine("Sandbox: cat(5) deny(1) file-read-data /Users/a/.netrc "+testTag, ""), denial{"cat", 5, "file-read-data", "/Users/a/.netrc"}, true},
		{logLine("Sandbox: curl(9) allow(0) network-outbound 127.0.0.1:4000", testTag), denial{}, false},
		{logLine("something else entirely", testTag), denial{}, false},
		// Another sandbox's denials: no tag, another tag, a tag that
		// ends with this one's.
		{logLine("Sandbox: cat(4242) deny(1) file-read-data /Users/a/.ssh/id_rsa", ""), denial{}, false},
		{logLine("Sandbox: cat(4242) deny(1) file-read-data /Users/a/.ssh/id_rsa", "dryexec-ffffffffffffffffffffffff"), denial{}, false},
		{logLine("Sandbox: cat(4242) deny(1) file-read-data /Users/a/.ssh/id_rsa", "x"+testTag), denial{}, false},
		{`{"eventMessage": "Sandbox: cat(1) deny(1) file-read-data /x\n` + testTag + `"`, denial{}, false}, // cut short
		{"Filtering the log data using \"sender == Sandbox\"\n", denial{}, false},
	} {
		got, ok := parseDenial([]byte(strings.TrimSpace(c.line)), testTag)
		if ok != c.ok || got != c.want {
			t.Errorf("%s: got %+v %v, want %+v %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

// fakeStream is `log stream` for the Linux tests: lines written to w, and
// mark writing the marker's denial (after what came before it, as the
// kernel's log keeps order), tagged tag.
type fakeStream struct {
	r   *io.PipeReader
	w   *io.PipeWriter
	tag string
}

func newFakeStream() *fakeStream {
	r, w := io.Pipe()
	return &fakeStream{r: r, w: w, tag: testTag}
}

// send writes the command's denials, tagged with the stream's tag.
func (f *fakeStream) send(msgs ...string) {
	for _, m := range msgs {
		io.WriteString(f.w, logLine(m, f.tag))
	}
}

func (f *fakeStream) mark(_ context.Context, path string) error {
	f.send("Sandbox: cat(1) deny(1) file-read-data " + path)
	return nil
}

// newLog is a denialLog over f, its markers in a new directory.
func (f *fakeStream) newLog(t *testing.T) *denialLog {
	return newDenialLog(f.r, f.tag, t.TempDir(), f.mark, func() { f.w.Close() })
}

// TestDenialsToViolations: between the start and end markers, a read of a
// masked path (the host's, and the clone's, named by its original) is one
// {kind: secret} violation per path, as on ns; a direct connection is a
// blocked network event; a denial of anything else, and the markers
// themselves, are neither.
func TestDenialsToViolations(t *testing.T) {
	scratch := t.TempDir()
	root, orig := scratch+"/w", "/Users/a/proj"
	pr := Profile{Writable: []string{root, scratch + "/tmp"}, Masked: []string{"/Users/a/.ssh", "/Users/a/.netrc", root + "/.env"}, NetProxyPort: 4000}
	fs := newFakeStream()
	l := fs.newLog(t)
	ctx := context.Background()
	if err := l.markAndWait(ctx, "mark-start"); err != nil {
		t.Fatal(err)
	}
	fs.send(
		"Sandbox: cat(10) deny(1) file-read-data /Users/a/.ssh/id_rsa",
		"Sandbox: cat(11) deny(1) file-read-data /Users/a/.ssh/id_rsa", // the same path again
		"Sandbox: sh(12) deny(1) file-read-data "+root+"/.env",
		"Sandbox: ls(13) deny(1) file-read-data /Users/a/.ssh",
		"Sandbox: touch(14) deny(1) file-write-create /Users/a/elsewhere", // not masked: a write outside the clone
		"Sandbox: curl(15) deny(1) network-outbound 93.184.216.34:443",
		"Sandbox: ssh(16) deny(1) network-outbound [2001:db8::1]:22",
		"Sandbox: dig(17) deny(1) network-outbound /private/var/run/mDNSResponder", // a unix socket
		"Sandbox: cat(18) deny(1) file-read-data /Users/a/.netrc-not",              // a sibling, not beneath
	)
	denied, warn := l.stop(ctx)
	if warn != "" {
		t.Fatal(warn)
	}
	if len(denied) != 9 {
		t.Fatalf("%d denials, want the command's 9 (markers excluded): %+v", len(denied), denied)
	}
	var got []string
	for _, v := range pr.violations(denied, func(p string) string { return fromClone(p, root, orig) }) {
		got = append(got, fmt.Sprintf("%s %s %d %s", v.Kind, v.Detail, v.PID, v.Exe))
	}
	want := []string{"secret /Users/a/.ssh/id_rsa 10 cat", "secret /Users/a/proj/.env 12 sh", "secret /Users/a/.ssh 13 ls"}
	if !slices.Equal(got, want) {
		t.Errorf("violations\n %q\nwant\n %q", got, want)
	}
	var nets []string
	for _, e := range pr.networkEvents(denied) {
		nets = append(nets, fmt.Sprintf("%s %s %d %s", e.Proto, e.Host, e.Port, e.Action))
		if !strings.Contains(e.Reason, "not through netsim's proxy") {
			t.Errorf("reason %q", e.Reason)
		}
	}
	if want := []string{"tcp 93.184.216.34 443 blocked", "tcp 2001:db8::1 22 blocked"}; !slices.Equal(nets, want) {
		t.Errorf("network events %q, want %q", nets, want)
	}
}

// TestDenialLogEndsEarly: a stream that ends before the end marker (log
// killed, reporting off) gives what it held and a warning, never a hang;
// one that ends before the start marker is a warning too.
func TestDenialLogEndsEarly(t *testing.T) {
	ctx := context.Background()
	fs := newFakeStream()
	l := fs.newLog(t)
	if err := l.markAndWait(ctx, "mark-start"); err != nil {
		t.Fatal(err)
	}
	fs.send("Sandbox: cat(10) deny(1) file-read-data /Users/a/.ssh/id_rsa")
	fs.w.Close()
	denied, warn := l.stop(ctx)
	if len(denied) != 1 || !strings.Contains(warn, "may be missing") {
		t.Fatalf("denials %+v, warning %q", denied, warn)
	}

	fs = newFakeStream()
	l = newDenialLog(fs.r, fs.tag, t.TempDir(), func(context.Context, string) error { fs.w.Close(); return nil }, func() {})
	if err := l.markAndWait(ctx, "mark-start"); err == nil || !strings.Contains(err.Error(), "ended before the marker") {
		t.Fatalf("got %v", err)
	}
	l.close()
}

// TestViolationKind: what the seatbelt rung reports is the kind the policy
// weighs as a contained read (issue: the same as ns), not another.
func TestViolationKind(t *testing.T) {
	v := Profile{Masked: []string{"/m"}}.violations([]denial{{Proc: "cat", PID: 1, Op: "file-read-data", Target: "/m/k"}}, func(p string) string { return p })
	if len(v) != 1 || v[0].Kind != dryexec.ViolationSecret {
		t.Fatalf("%+v", v)
	}
}

// fakeKernel is the unified log as two `log stream`s see it: every
// sandbox's denials, in one order, delivered to every stream (as to a
// stream without a predicate: the reader's own check of the tag is what is
// tested).
type fakeKernel struct {
	mu      sync.Mutex
	streams []*io.PipeWriter
}

func (k *fakeKernel) stream() *io.PipeReader {
	r, w := io.Pipe()
	k.mu.Lock()
	k.streams = append(k.streams, w)
	k.mu.Unlock()
	return r
}

// deny reports a denial under a profile tagged tag to every stream.
func (k *fakeKernel) deny(tag, msg string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.streams {
		io.WriteString(w, logLine(msg, tag))
	}
}

// TestDenialsTwoSandboxes: two trials run at once, both with ~/.ssh masked,
// their commands' denials interleaved in the one log. Each trial's
// violations and network events are exactly its own command's, whatever
// the path or pid; a denial of another sandbox entirely (no tag) is
// neither's; one trial's markers end only its own reading.
func TestDenialsTwoSandboxes(t *testing.T) {
	const tagA, tagB = "dryexec-aaaaaaaaaaaaaaaaaaaaaaaa", "dryexec-bbbbbbbbbbbbbbbbbbbbbbbb"
	k := &fakeKernel{}
	pr := Profile{Masked: []string{"/Users/a/.ssh", "/Users/a/.netrc"}}
	open := func(tag string) *denialLog {
		r := k.stream()
		return newDenialLog(r, tag, t.TempDir(), func(_ context.Context, path string) error {
			k.deny(tag, "Sandbox: cat(1) deny(1) file-read-data "+path)
			return nil
		}, func() { r.CloseWithError(io.EOF) })
	}
	ctx := context.Background()
	a, b := open(tagA), open(tagB)
	for _, l := range []*denialLog{a, b} {
		if err := l.markAndWait(ctx, "mark-start"); err != nil {
			t.Fatal(err)
		}
	}
	k.deny(tagA, "Sandbox: cat(100) deny(1) file-read-data /Users/a/.ssh/id_rsa")
	k.deny(tagB, "Sandbox: cat(100) deny(1) file-read-data /Users/a/.ssh/id_ed25519") // a pid reused
	k.deny("", "Sandbox: Slack(300) deny(1) file-read-data /Users/a/.netrc")          // an app's own sandbox
	k.deny(tagB, "Sandbox: curl(101) deny(1) network-outbound 93.184.216.34:443")
	k.deny(tagA, "Sandbox: git(102) deny(1) file-read-data /Users/a/.netrc")
	// B's command pokes at A's marker directory, as if to end A's reading.
	k.deny(tagB, "Sandbox: sh(103) deny(1) file-read-data "+a.marks+"/mark-0000000000000000")
	gotA, warnA := a.stop(ctx)
	k.deny(tagB, "Sandbox: nc(104) deny(1) network-outbound 10.0.0.1:22") // after A ended, before B's end
	gotB, warnB := b.stop(ctx)
	if warnA != "" || warnB != "" {
		t.Fatal(warnA, warnB)
	}
	summary := func(ds []denial) []string {
		var out []string
		for _, v := range pr.violations(ds, func(p string) string { return p }) {
			out = append(out, fmt.Sprintf("secret %s %d", v.Detail, v.PID))
		}
		for _, e := range pr.networkEvents(ds) {
			out = append(out, fmt.Sprintf("net %s:%d", e.Host, e.Port))
		}
		return out
	}
	if got, want := summary(gotA), []string{"secret /Users/a/.ssh/id_rsa 100", "secret /Users/a/.netrc 102"}; !slices.Equal(got, want) {
		t.Errorf("trial A: %q, want %q", got, want)
	}
	if got, want := summary(gotB), []string{"secret /Users/a/.ssh/id_ed25519 100", "net 93.184.216.34:443", "net 10.0.0.1:22"}; !slices.Equal(got, want) {
		t.Errorf("trial B: %q, want %q", got, want)
	}
}

// TestMarkerNotForged: only a denial to read the pending marker itself, under
// the trial's tag, ends a wait: a command's denial of another operation on
// that very path, or another sandbox's read of it, does not (the stream then
// ends, and the wait says so), and neither is counted as the command's.
func TestMarkerNotForged(t *testing.T) {
	for _, forge := range []func(fs *fakeStream, path string){
		func(fs *fakeStream, path string) { fs.send("Sandbox: sh(7) deny(1) file-write-create " + path) },
		func(fs *fakeStream, path string) {
			io.WriteString(fs.w, logLine("Sandbox: cat(7) deny(1) file-read-data "+path, "dryexec-ffffffffffffffffffffffff"))
		},
	} {
		fs := newFakeStream()
		l := newDenialLog(fs.r, fs.tag, t.TempDir(), func(_ context.Context, path string) error {
			forge(fs, path)
			fs.w.Close()
			return nil
		}, func() {})
		err := l.markAndWait(context.Background(), "mark-end")
		if err == nil || !strings.Contains(err.Error(), "ended before the marker") {
			t.Errorf("a forged marker ended the wait: %v", err)
		}
		l.close()
		if len(l.got) != 0 {
			t.Errorf("the forgery counted as a denial: %+v", l.got)
		}
	}
}
