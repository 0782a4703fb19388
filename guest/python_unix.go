//go:build unix

package guest

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	"os"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/dryexec/dryexec/wire"
)

// pyRunner is the Python side of exec_python; its header comment is the
// protocol spoken on fds 3 and 4.
//
//go:embed pyrunner.py
var pyRunner string

// exec_python limits. The runner applies the print caps itself (so that it does
// not ship text nobody keeps), but the runner is the user's process: the guest
// applies them again and bounds everything it reads from it.
const (
	printEntryMax   = 64 << 10 // text kept per print entry
	printEntriesMax = 1000     // entries kept; later prints are counted as dropped
	printTotalMax   = 1 << 20  // text kept over all entries
	outputsMax      = 16 << 20 // encoded outputs per exec (more are skipped as too large)
	// runnerLineMax bounds one message line from the runner: the result, with
	// up to outputsMax of outputs (base64 grows bytes by a third), is the largest.
	runnerLineMax = 32 << 20
	tracebackMax  = 256 << 10 // the tail is kept
	errMessageMax = 64 << 10
	skippedMax    = 1024 // bytes of one outputs_skipped type description
	// resultGrace is how long the runner may take to exit after its result
	// (it exits at once; only a hostile one lingers).
	resultGrace = 2 * time.Second
)

// resultMax is what one frame can carry of the encoded result (a variable for
// tests).
var resultMax = wire.MaxAttachments*wire.MaxAttachment - 64<<10

// runnerStart is the guest's first message to the runner.
type runnerStart struct {
	Code      string                `json:"code"`
	Inputs    map[string]wire.Value `json:"inputs"`
	Workspace string                `json:"workspace"`
	// Cwd is the shell's: a pre-started runner was started elsewhere.
	Cwd string `json:"cwd"`
	// SetEnv and UnsetEnv bring a pre-started runner's PWD and OLDPWD to
	// the call's (see shellDirVars).
	SetEnv   map[string]string `json:"setenv,omitempty"`
	UnsetEnv []string          `json:"unsetenv,omitempty"`
	Limits   runnerLimits      `json:"limits"`
	// HostObjects are bound as globals of their own name too.
	HostObjects []string `json:"host_objects,omitempty"`
}

type runnerLimits struct {
	Entry   int `json:"entry"`
	Entries int `json:"entries"`
	Total   int `json:"total"`
	Outputs int `json:"outputs"`
	Line    int `json:"line"`
	Value   int `json:"value"`
}

// runnerMsg is any message from the runner; Op says which fields matter.
type runnerMsg struct {
	Op string `json:"op"`
	// print
	Type      string             `json:"type"`
	Len       int                `json:"len"`
	Text      string             `json:"text"`
	Truncated bool               `json:"truncated"`
	Objects   []wire.PrintObject `json:"objects"`
	// print: "" or "echo"; cache.set: the value's kind ("" or "pickle")
	Kind string `json:"kind"`
	// requests
	Key    string                `json:"key"`
	NBytes int64                 `json:"nbytes"`
	Name   string                `json:"name"`
	Value  *wire.Value           `json:"value"`
	Object string                `json:"object"`
	Method string                `json:"method"`
	Args   []wire.Value          `json:"args"`
	Kwargs map[string]wire.Value `json:"kwargs"`
	// result
	OK             bool                  `json:"ok"`
	Error          *wire.PythonError     `json:"error"`
	Outputs        map[string]wire.Value `json:"outputs"`
	OutputsSkipped map[string]string     `json:"outputs_skipped"`
}

// runnerReply answers one runner request.
type runnerReply struct {
	OK      bool        `json:"ok"`
	Code    string      `json:"code,omitempty"`
	Message string      `json:"message,omitempty"`
	Found   bool        `json:"found,omitempty"`
	NBytes  int         `json:"nbytes,omitempty"`
	Keys    []string    `json:"keys,omitempty"`
	Value   *wire.Value `json:"value,omitempty"`
	Kind    string      `json:"kind,omitempty"` // cache.get: the value's kind
}

var dropLine = []byte(`{"op":"drop"}`)

// pyExec is one exec_python's conversation with its runner. The relay goroutine
// owns every field below start until relayDone is closed.
type pyExec struct {
	s     *session
	ctx   context.Context // cancelled when the exec ends: abandons host calls
	r     *runnerProc     // its in (fd 3) and respW (fd 4)
	kill  func()
	start runnerStart

	prints  []wire.PrintEntry
	printed int // bytes of text kept in prints
	// entryMax and totalMax are the print caps (the exec's caps or the
	// defaults); marked: the exec gave caps, so dropped output is marked.
	entryMax, totalMax int
	marked             bool
	dropped            int
	result             *runnerMsg
	violation          string
	gotResult          chan struct{} // closed when the result arrives
}

// runnerStartMax bounds a runner's start when the call has a shorter
// timeout (execPython).
const runnerStartMax = 30 * time.Second

// execPython runs one piece of Python in a runner process of its own: the
// pre-started one if it still fits, else a fresh one. It runs in the shell's cwd
// and environment, and is killed (with its process group) at the timeout or when
// it is done. Unless req.Fresh, the next call's runner is started before this
// returns.
func (s *session) execPython(ctx context.Context, req *wire.ExecPython) (*wire.PythonResult, error) {
	py := pythonPath()
	if py == "" {
		s.dropRunner()
		return nil, remote("no_python", "there is no python3 in the sandbox")
	}
	// From the first exec_python on, the next one's runner waits ready.
	s.pyUsed = true
	if !req.Fresh {
		defer s.prestartPython()
	}
	res := &wire.PythonResult{Prints: []wire.PrintEntry{}, Outputs: map[string]wire.Value{}, OutputsSkipped: map[string]string{}}
	env, _ := boundedEnv(s.shell.env)
	cwd := s.shell.cwd
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		cwd = s.ws
	}
	dir := runnerDir(env, cwd)
	start := time.Now()
	// The timeout is the code's: it counts from when the runner is ready
	// (its interpreter started: the code runs next), so that a slow start
	// (a VM under emulation: ≈3 s for python3 under TCG, a loaded host) does
	// not eat the code's time. The start itself is bounded apart, by the
	// timeout or runnerStartMax, whichever is longer (a sitecustomize that
	// never returns still ends).
	var timeout, grace <-chan time.Time
	restart := func() {}
	if req.TimeoutMS > 0 {
		d := time.Duration(req.TimeoutMS) * time.Millisecond
		timer := time.NewTimer(max(d, runnerStartMax))
		defer timer.Stop()
		timeout = timer.C
		restart = func() {
			if timeout != nil { // not fired yet
				timer.Reset(d)
			}
		}
	}
	r := s.takeRunner(py, env, dir, req.Fresh)
	if r != nil {
		// It may still be starting.
		select {
		case <-r.ready:
			if !r.alive() || !r.unchanged() {
				r.discard(s)
				r = nil
			} else {
				restart()
			}
		case <-timeout:
			timeout = nil
			res.TimedOut = true
			killGroup(r.pid)
		case <-ctx.Done():
			killGroup(r.pid)
		}
	}
	if r == nil {
		var err error
		if r, err = s.startRunner(py, env, dir); err != nil {
			return nil, remote("exec_python", "starting %s: %v", py, err)
		}
	}
	defer r.reqR.Close()
	defer r.respW.Close()
	pid := r.pid
	s.announce(pid)
	execCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	entryMax, totalMax := printCaps(req.Caps)
	x := &pyExec{
		s: s, ctx: execCtx, r: r,
		kill:      func() { killGroup(pid) },
		gotResult: make(chan struct{}),
		entryMax:  entryMax, totalMax: totalMax, marked: req.Caps != nil,
		start: runnerStart{Code: req.Code, Inputs: req.Inputs, Workspace: s.ws, Cwd: cwd, HostObjects: req.HostObjects, Limits: runnerLimits{
			Entry: entryMax, Entries: printEntriesMax, Total: totalMax, Outputs: outputsMax, Line: runnerLineMax, Value: wire.MaxCacheValue}},
	}
	x.start.SetEnv, x.start.UnsetEnv = envChanges(r.env, env)
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		x.relay()
	}()
	gotResult := x.gotResult
	// A runner started for this call: its code starts once it is ready.
	var ready <-chan struct{}
	select {
	case <-r.ready:
	default:
		ready = r.ready
	}
wait:
	for {
		select {
		case <-ready:
			ready = nil
			restart()
		case <-r.exited:
			break wait
		case <-timeout:
			timeout = nil
			res.TimedOut = true
			killGroup(pid)
		case <-ctx.Done():
			killGroup(pid)
		case <-gotResult:
			gotResult = nil
			grace = time.After(resultGrace)
		case <-grace:
			grace = nil
			killGroup(pid)
		}
	}
	// Whatever the code started in its group goes with it.
	killGroup(pid)
	s.reapOrphans()
	cancel()
	// The runner is dead, so everything it wrote is in the pipe: the relay
	// reads it all, however late a loaded machine schedules it (a fixed wait
	// here lost the result of a big print under load). Then, if a process
	// outside the group still holds fd 3 open, stop listening.
	select {
	case <-relayDone:
	case <-pipeDrained(r.reqR, relayDone):
		r.reqR.Close()
		r.respW.Close()
		<-relayDone
	}
	res.DurationNS = time.Since(start).Nanoseconds()
	res.Violations = s.takeViolations()
	res.OOMKills = s.takeOOMKills()
	x.markDropped()
	res.Prints, res.PrintsDropped = x.prints, x.dropped
	if res.Prints == nil {
		res.Prints = []wire.PrintEntry{}
	}
	tb, _ := r.out.Bytes()
	res.Transcript = capTranscript(string(tb), req.Caps)
	switch {
	case res.TimedOut:
		res.Error = &wire.PythonError{Type: "TimeoutError", Message: fmt.Sprintf("exec_python timed out after %v; the runner was killed", time.Duration(req.TimeoutMS)*time.Millisecond)}
	case x.violation != "":
		res.Error = &wire.PythonError{Type: "RunnerProtocolError", Message: "the python runner broke its protocol: " + x.violation}
	case x.result == nil:
		res.Error = &wire.PythonError{Type: "RunnerCrash", Message: crashMessage(r.cmd.ProcessState)}
	default:
		x.fillResult(res)
	}
	return res, nil
}

// crashMessage says how the runner ended without a result.
func crashMessage(ps *os.ProcessState) string {
	if ps == nil {
		return "the python runner ended before returning a result"
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("python was killed by signal %d (%v) before returning a result", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("python exited with status %d before returning a result (os._exit?)", ps.ExitCode())
}

// fillResult copies the runner's result into res, checking it.
func (x *pyExec) fillResult(res *wire.PythonResult) {
	m := x.result
	res.OK = m.OK
	if m.Error != nil {
		e := *m.Error
		e.Type = clipHead(e.Type, 256)
		e.Message = clipHead(e.Message, errMessageMax)
		e.Traceback = clipTail(e.Traceback, tracebackMax)
		res.Error = &e
	} else if !m.OK {
		res.Error = &wire.PythonError{Type: "Error", Message: "the code failed"}
	}
	for name, v := range m.Outputs {
		if err := wire.CheckValue(&v); err != nil {
			res.OutputsSkipped[name] = "invalid value: " + err.Error()
			continue
		}
		res.Outputs[name] = v
	}
	for name, t := range m.OutputsSkipped {
		if _, ok := res.Outputs[name]; !ok {
			res.OutputsSkipped[name] = clipHead(t, skippedMax)
		}
	}
}

// encodeResult is wire.EncodeBody for a result, made to fit in one frame if it is
// too large: outputs go first (to outputs_skipped), then print entries, then
// the transcript's head.
func encodeResult(res *wire.PythonResult) (any, [][]byte, error) {
	b, err := json.Marshal(res)
	if err != nil {
		return nil, nil, err
	}
	if len(b) > resultMax {
		fitResult(res)
		if b, err = json.Marshal(res); err != nil {
			return nil, nil, err
		}
	}
	return wire.EncodeRawBody(b)
}

func fitResult(res *wire.PythonResult) {
	for name, v := range res.Outputs {
		res.OutputsSkipped[name] = v.Type + " (too large: the result would not fit in one frame)"
		delete(res.Outputs, name)
	}
	t := res.Transcript
	res.Transcript = ""
	b, _ := json.Marshal(res)
	if len(b) > resultMax/2 {
		res.PrintsDropped += len(res.Prints)
		res.Prints = []wire.PrintEntry{}
		b, _ = json.Marshal(res)
	}
	res.Transcript = tailWithin(t, resultMax-len(b)-64<<10)
}

// tailWithin is the longest tail of s whose JSON encoding (as encoding/json
// writes a string) takes at most n bytes.
func tailWithin(s string, n int) string {
	used, i := 0, len(s)
	for i > 0 {
		r, size := utf8.DecodeLastRuneInString(s[:i])
		c := size
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029', r < 0x20 && r != '\n' && r != '\r' && r != '\t',
			r == '<', r == '>', r == '&':
			c = 6
		case r == '"', r == '\\', r == '\n', r == '\r', r == '\t':
			c = 2
		}
		if used+c > n {
			break
		}
		used += c
		i -= size
	}
	return s[i:]
}

func clipHead(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func clipTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// relay reads the runner's messages until it closes fd 3: print entries are
// kept, requests go to the host and their replies back to the runner.
func (x *pyExec) relay() {
	if err := x.write(&x.start, nil); err != nil {
		return // the runner is gone; its exit says why
	}
	// The ready message comes first (read by readReady).
	<-x.r.ready
	if err := x.r.readyErr; err != nil {
		if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
			x.violate(err.Error())
		}
		return
	}
	for {
		line, err := readLine(x.r.in, runnerLineMax)
		if err == io.EOF {
			return
		}
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				x.violate(err.Error())
			}
			return
		}
		if bytes.Equal(line, dropLine) {
			x.dropped++
			continue
		}
		// Numbers stay exact (json.Number) on their way to the host.
		var m runnerMsg
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			x.violate("unreadable message: " + err.Error())
			return
		}
		switch m.Op {
		case "print":
			x.addPrint(&m)
		case "result":
			if x.result == nil {
				x.result = &m
				close(x.gotResult)
			}
		case "cache.get", "cache.has", "cache.keys", "cache.set", "cache.del", "emit", "hostcall":
			if m.Op == "cache.set" && m.Kind != "" && m.Kind != "pickle" {
				x.violate(fmt.Sprintf("cache.set of kind %q", m.Kind))
				return
			}
			var payload []byte
			if m.Op == "cache.set" {
				if m.NBytes < 0 || m.NBytes > wire.MaxCacheValue {
					x.violate(fmt.Sprintf("cache value of %d bytes (max %d)", m.NBytes, wire.MaxCacheValue))
					return
				}
				payload = make([]byte, m.NBytes)
				if _, err := io.ReadFull(x.r.in, payload); err != nil {
					x.violate("cache.set: short value")
					return
				}
			}
			rep, data := x.serve(&m, payload)
			if err := x.write(rep, data); err != nil {
				return
			}
		default:
			x.violate(fmt.Sprintf("unknown op %q", m.Op))
			return
		}
	}
}

func (x *pyExec) violate(why string) {
	if x.violation == "" {
		x.violation = why
	}
	x.kill()
}

// write sends one message line (and payload) to the runner.
func (x *pyExec) write(v any, payload []byte) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := x.r.respW.Write(b); err != nil {
		return err
	}
	if len(payload) > 0 {
		_, err = x.r.respW.Write(payload)
	}
	return err
}

// readLine reads one line of at most max bytes, without its newline.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > max+1 {
			return nil, fmt.Errorf("a message line longer than %d bytes", max)
		}
		line = append(line, chunk...)
		switch err {
		case nil:
			return line[:len(line)-1], nil
		case bufio.ErrBufferFull:
			continue
		case io.EOF:
			if len(line) == 0 {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("a message cut short: %w", io.ErrUnexpectedEOF)
		default:
			return nil, err
		}
	}
}

// addPrint keeps one print entry within the caps, or counts it as dropped.
func (x *pyExec) addPrint(m *runnerMsg) {
	if len(x.prints) >= printEntriesMax || x.printed >= x.totalMax {
		x.dropped++
		return
	}
	text, truncated := m.Text, m.Truncated
	if keep := min(x.entryMax, x.totalMax-x.printed); len(text) > keep {
		text, truncated = clipHead(text, keep), true
	}
	x.printed += len(text)
	if truncated && x.marked {
		text += wire.CapsMarker
	}
	kind := ""
	if m.Kind == "echo" {
		kind = "echo"
	}
	x.prints = append(x.prints, wire.PrintEntry{Kind: kind, Type: clipHead(m.Type, 1024), Len: max(m.Len, len(m.Text)), Text: text, Truncated: truncated,
		Objects: printObjects(m.Objects)})
}

// serve relays one runner request to the host.
func (x *pyExec) serve(m *runnerMsg, payload []byte) (*runnerReply, []byte) {
	if m.Op != "cache.keys" && m.Op != "emit" && m.Op != "hostcall" && len(m.Key) > wire.MaxCacheKey {
		return refuse("value", "cache keys are at most %d bytes", wire.MaxCacheKey), nil
	}
	switch m.Op {
	case "cache.get", "cache.has":
		found, kind, v, err := x.cacheGet(m.Key, m.Op == "cache.has")
		if err != nil {
			return refusal(err), nil
		}
		return &runnerReply{OK: true, Found: found, NBytes: len(v), Kind: kind}, v
	case "cache.keys":
		f, err := x.s.peer.Call(x.ctx, wire.VerbCacheKeys, nil)
		if err != nil {
			return refusal(err), nil
		}
		var ks wire.CacheKeys
		if err := f.Decode(&ks); err != nil {
			return refusal(err), nil
		}
		return &runnerReply{OK: true, Keys: ks.Keys}, nil
	case "cache.set":
		if err := x.cacheSet(m.Key, m.Kind, payload); err != nil {
			return refusal(err), nil
		}
		return &runnerReply{OK: true}, nil
	case "cache.del":
		f, err := x.s.peer.Call(x.ctx, wire.VerbCacheDel, &wire.CacheRequest{Key: m.Key})
		if err != nil {
			return refusal(err), nil
		}
		var rep wire.CacheReply
		if err := f.Decode(&rep); err != nil {
			return refusal(err), nil
		}
		return &runnerReply{OK: true, Found: rep.Found}, nil
	case "emit":
		if m.Value == nil {
			return refuse("type", "emit without a value"), nil
		}
		if err := wire.CheckValue(m.Value); err != nil {
			return refuse("type", "emit: %v", err), nil
		}
		body, bin, err := wire.EncodeBody(&wire.Emit{Name: m.Name, Value: *m.Value})
		if err != nil {
			return refuse("limit", "emit: %v", err), nil
		}
		if _, err := x.s.peer.Call(x.ctx, wire.VerbEmit, body, bin...); err != nil {
			return refusal(err), nil
		}
		return &runnerReply{OK: true}, nil
	case "hostcall":
		args := m.Args
		if args == nil {
			args = []wire.Value{}
		}
		for i := range args {
			if err := wire.CheckValue(&args[i]); err != nil {
				return refuse("type", "argument %d: %v", i+1, err), nil
			}
		}
		for k, v := range m.Kwargs {
			if err := wire.CheckValue(&v); err != nil {
				return refuse("type", "keyword %q: %v", k, err), nil
			}
		}
		body, bin, err := wire.EncodeBody(&wire.HostCall{Object: m.Object, Method: m.Method, Args: args, Kwargs: m.Kwargs})
		if err != nil {
			return refuse("limit", "hostcall: %v", err), nil
		}
		f, err := x.s.peer.Call(x.ctx, wire.VerbHostCall, body, bin...)
		if err != nil {
			return refusal(err), nil
		}
		var r wire.HostCallResult
		if err := wire.DecodeBody(f, &r, true); err != nil {
			return refusal(err), nil
		}
		if err := wire.CheckValue(&r.Value); err != nil {
			return refuse("host_error", "the host's answer: %v", err), nil
		}
		return &runnerReply{OK: true, Value: &r.Value}, nil
	}
	return refuse("value", "unknown op %q", m.Op), nil
}

func refuse(code, format string, a ...any) *runnerReply {
	return &runnerReply{Code: code, Message: fmt.Sprintf(format, a...)}
}

// refusal turns a failed host call into a reply: the host's own refusal keeps
// its code (the runner picks the Python exception by it).
func refusal(err error) *runnerReply {
	var re *wire.RemoteError
	if errors.As(err, &re) {
		return &runnerReply{Code: re.Code, Message: re.Message}
	}
	return &runnerReply{Code: "unavailable", Message: "dryexec: " + err.Error()}
}

// cacheGet fetches a value from the host in chunks (see wire.CacheRequest). If the
// value changes on the host between chunks, it starts again.
func (x *pyExec) cacheGet(key string, head bool) (bool, string, []byte, error) {
	var lastErr error
	for attempt := 0; attempt < 4; attempt++ {
		found, kind, v, err := x.cacheGetOnce(key, head)
		var re *wire.RemoteError
		if errors.As(err, &re) && re.Code == "changed" {
			lastErr = err
			continue
		}
		return found, kind, v, err
	}
	return false, "", nil, lastErr
}

func (x *pyExec) cacheGetOnce(key string, head bool) (bool, string, []byte, error) {
	var buf []byte
	var gen uint64
	var off int64
	for {
		f, err := x.s.peer.Call(x.ctx, wire.VerbCacheGet, &wire.CacheRequest{Key: key, Offset: off, Gen: gen, Head: head})
		if err != nil {
			return false, "", nil, err
		}
		var rep wire.CacheReply
		if err := f.Decode(&rep); err != nil {
			return false, "", nil, err
		}
		if !rep.Found {
			return false, "", nil, nil
		}
		if head {
			return true, "", nil, nil
		}
		if rep.Size < 0 || rep.Size > wire.MaxCacheValue || len(f.Bin) != 1 || (rep.Kind != "" && rep.Kind != "pickle") {
			return false, "", nil, fmt.Errorf("cache.get: a malformed answer from the host")
		}
		if off == 0 {
			gen = rep.Gen
			buf = make([]byte, 0, rep.Size)
		} else if rep.Gen != gen {
			return false, "", nil, &wire.RemoteError{Code: "changed", Message: "the value changed while it was read"}
		}
		chunk := f.Bin[0]
		if off+int64(len(chunk)) > rep.Size || (len(chunk) == 0 && off < rep.Size) {
			return false, "", nil, fmt.Errorf("cache.get: a chunk that does not fit the value's size")
		}
		buf = append(buf, chunk...)
		off += int64(len(chunk))
		if off == rep.Size {
			return true, rep.Kind, buf, nil
		}
	}
}

// cacheSet sends a value to the host in chunks of one attachment each.
func (x *pyExec) cacheSet(key, kind string, v []byte) error {
	var off int
	for {
		n := min(len(v)-off, wire.MaxAttachment)
		_, err := x.s.peer.Call(x.ctx, wire.VerbCacheSet, &wire.CacheRequest{Key: key, Offset: int64(off), Size: int64(len(v)), Kind: kind}, v[off:off+n])
		if err != nil {
			return err
		}
		off += n
		if off >= len(v) {
			return nil
		}
	}
}

// pipeDrained is closed once pipe f holds no unread bytes (FIONREAD; what a
// reader has taken into its buffer is its own), or done is closed. It polls:
// a pipe has no event for "emptied".
func pipeDrained(f *os.File, done <-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	rc, err := f.SyscallConn()
	if err != nil {
		close(out)
		return out
	}
	go func() {
		defer close(out)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			n, ierr := 0, error(nil)
			if cerr := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), fionread) }); cerr != nil || ierr != nil || n == 0 {
				return
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return out
}
