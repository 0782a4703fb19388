package wire

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rw joins a reader and a writer into the io.ReadWriter NewConn wants.
type rw struct {
	io.Reader
	io.Writer
}

// readerConn is a Conn that reads data and discards what it writes.
func readerConn(data []byte) *Conn {
	return NewConn(rw{bytes.NewReader(data), io.Discard})
}

// encode returns the wire bytes of frames, written in order on one Conn.
func encode(tb testing.TB, frames ...*Frame) []byte {
	tb.Helper()
	var buf bytes.Buffer
	c := NewConn(&buf)
	for _, f := range frames {
		if err := c.Write(f); err != nil {
			tb.Fatalf("Write(%s %q): %v", f.Kind, f.Verb, err)
		}
	}
	return buf.Bytes()
}

// u32 is n as a big-endian length prefix.
func u32(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

// chunk is b with its length prefix.
func chunk(b []byte) []byte { return append(u32(uint32(len(b))), b...) }

// raw builds a stream from a header string and attachments, bypassing Write.
func raw(header string, bin ...[]byte) []byte {
	out := chunk([]byte(header))
	for _, b := range bin {
		out = append(out, chunk(b)...)
	}
	return out
}

// pattern is n bytes that differ between seeds, so misplaced bytes are noticed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>8)
	}
	return b
}

func mustJSON(tb testing.TB, v any) json.RawMessage {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// sameFrame reports how got, as read, differs from want, as written: NBin must
// equal len(Bin) and a nil attachment reads back as an empty one.
func sameFrame(want, got *Frame) error {
	switch {
	case got.ID != want.ID:
		return fmt.Errorf("ID %d, want %d", got.ID, want.ID)
	case got.Kind != want.Kind:
		return fmt.Errorf("Kind %q, want %q", got.Kind, want.Kind)
	case got.Verb != want.Verb:
		return fmt.Errorf("Verb %q, want %q", got.Verb, want.Verb)
	case !bytes.Equal(got.Body, want.Body):
		return fmt.Errorf("Body %.200q, want %.200q", got.Body, want.Body)
	case got.NBin != len(got.Bin):
		return fmt.Errorf("NBin %d but %d attachments", got.NBin, len(got.Bin))
	case len(got.Bin) != len(want.Bin):
		return fmt.Errorf("%d attachments, want %d", len(got.Bin), len(want.Bin))
	}
	for i := range want.Bin {
		if !bytes.Equal(got.Bin[i], want.Bin[i]) {
			return fmt.Errorf("attachment %d: %d bytes differ from the %d written", i, len(got.Bin[i]), len(want.Bin[i]))
		}
		if got.Bin[i] == nil {
			return fmt.Errorf("attachment %d read as nil", i)
		}
	}
	return nil
}

// headerOfSize returns a frame whose encoded JSON header is exactly n bytes.
func headerOfSize(tb testing.TB, n int) *Frame {
	tb.Helper()
	f := &Frame{ID: 9, Kind: KindEvent, Verb: "big", Body: json.RawMessage(`""`)}
	base := len(mustJSON(tb, f))
	if n < base {
		tb.Fatalf("header of %d bytes is smaller than the minimum %d", n, base)
	}
	f.Body = json.RawMessage(`"` + strings.Repeat("x", n-base) + `"`)
	if got := len(mustJSON(tb, f)); got != n {
		tb.Fatalf("built a header of %d bytes, want %d", got, n)
	}
	return f
}

func roundTripCases(tb testing.TB) []struct {
	name  string
	frame *Frame
} {
	manySmall := make([][]byte, MaxAttachments)
	for i := range manySmall {
		manySmall[i] = pattern(i*37, byte(i))
	}
	start := TrialStart{
		TrialRun: TrialRun{Argv: []string{"sh", "-c", "echo <hi> & exit 3"}, Env: []string{"A=1", "PATH=/bin"},
			Cwd: "/tmp/ünïcode", TimeoutMS: 1500, Stdin: true},
		Mounts:   []MountSpec{{Path: "/"}, {Path: "/home"}},
		Hostname: "h", UpperSize: 1 << 30, Rootless: true, CommandUserNS: true,
	}
	return []struct {
		name  string
		frame *Frame
	}{
		{"hello", &Frame{Kind: KindHello, Body: mustJSON(tb, Hello{Version: Version, Role: "ns-trial"})}},
		{"req no body", &Frame{ID: 1, Kind: KindReq, Verb: VerbTrialStart}},
		{"req trial.start", &Frame{ID: 1, Kind: KindReq, Verb: VerbTrialStart, Body: mustJSON(tb, start)}},
		{"resp max id", &Frame{ID: ^uint64(0), Kind: KindResp, Verb: "x", Body: json.RawMessage(`{"ok":true}`)}},
		{"err", &Frame{ID: 7, Kind: KindErr, Body: mustJSON(tb, RemoteError{Code: "protocol", Message: "bad\nthing \u2028"})}},
		{"event trial.exit", &Frame{Kind: KindEvent, Verb: VerbTrialExit, Body: mustJSON(tb, TrialExit{ExitCode: -1, Signal: "KILL", DurationNS: 1 << 40})}},
		{"event trial.done", &Frame{Kind: KindEvent, Verb: VerbTrialDone, Body: mustJSON(tb, TrialDone{CPUUserNS: 7, MaxRSS: 1 << 40})}},
		{"event null body", &Frame{Kind: KindEvent, Verb: "n", Body: json.RawMessage(`null`)}},
		{"one attachment", &Frame{Kind: KindEvent, Verb: VerbFSData, Bin: [][]byte{[]byte("hello, world")}}},
		{"one empty attachment", &Frame{Kind: KindEvent, Verb: VerbFSData, Bin: [][]byte{{}}}},
		{"one nil attachment", &Frame{Kind: KindEvent, Verb: VerbFSData, Bin: [][]byte{nil}}},
		{"empty attachments among others", &Frame{Kind: KindResp, ID: 3, Bin: [][]byte{nil, []byte("a"), {}, pattern(70_000, 1), nil}}},
		{"max attachments", &Frame{Kind: KindResp, ID: 4, Body: json.RawMessage(`[1,2,3]`), Bin: manySmall}},
		{"max attachments all empty", &Frame{Kind: KindEvent, Bin: make([][]byte, MaxAttachments)}},
		{"attachment of exactly MaxAttachment", &Frame{Kind: KindEvent, Verb: VerbFSData, Bin: [][]byte{pattern(MaxAttachment, 5)}}},
		{"attachment of MaxAttachment-1", &Frame{Kind: KindEvent, Verb: VerbFSData, Bin: [][]byte{pattern(MaxAttachment-1, 6)}}},
		{"attachments larger than the buffers", &Frame{Kind: KindEvent, Bin: [][]byte{pattern(64<<10-1, 1), pattern(64<<10, 2), pattern(64<<10+1, 3), pattern(300_000, 4)}}},
		{"large body", &Frame{Kind: KindReq, ID: 2, Verb: "v", Body: mustJSON(tb, strings.Repeat("<&>ab\"\\", 20_000))}},
		{"header of exactly MaxHeader", headerOfSize(tb, MaxHeader)},
		{"large body and attachments", &Frame{Kind: KindResp, ID: 5, Body: mustJSON(tb, strings.Repeat("z", 500_000)), Bin: [][]byte{pattern(MaxAttachment, 8), pattern(12345, 9)}}},
	}
}

// TestRoundTrip writes every case's frame, one after another, on one Conn and
// reads them back from another, over a bytes.Buffer and over a net.Pipe.
func TestRoundTrip(t *testing.T) {
	cases := roundTripCases(t)
	frames := make([]*Frame, len(cases))
	for i, tc := range cases {
		frames[i] = tc.frame
	}

	check := func(t *testing.T, r *Conn) {
		t.Helper()
		for _, tc := range cases {
			got, err := r.Read()
			if err != nil {
				t.Fatalf("%s: Read: %v", tc.name, err)
			}
			if err := sameFrame(tc.frame, got); err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
		}
		for range 2 { // EOF at a boundary, and it stays EOF
			if f, err := r.Read(); err != io.EOF {
				t.Fatalf("Read after the last frame = %v, %v; want io.EOF", f, err)
			}
		}
	}

	t.Run("bytes.Buffer", func(t *testing.T) {
		var buf bytes.Buffer
		c := NewConn(&buf)
		for _, tc := range cases {
			if err := c.Write(tc.frame); err != nil {
				t.Fatalf("%s: Write: %v", tc.name, err)
			}
		}
		check(t, c)
	})

	t.Run("bytes.Buffer per case", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				data := encode(t, tc.frame)
				r := readerConn(data)
				got, err := r.Read()
				if err != nil {
					t.Fatal(err)
				}
				if err := sameFrame(tc.frame, got); err != nil {
					t.Error(err)
				}
				if _, err := r.Read(); err != io.EOF {
					t.Errorf("second Read = %v, want io.EOF", err)
				}
				// Re-encoding what was read gives the same bytes.
				if again := encode(t, got); !bytes.Equal(again, data) {
					t.Errorf("re-encoding the frame read changed its %d bytes (now %d)", len(data), len(again))
				}
			})
		}
	})

	t.Run("net.Pipe", func(t *testing.T) {
		a, b := net.Pipe()
		defer b.Close()
		w, r := NewConn(a), NewConn(b)
		errc := make(chan error, 1)
		go func() {
			defer a.Close()
			for _, f := range frames {
				if err := w.Write(f); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		check(t, r)
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("net.Pipe both ways", func(t *testing.T) {
		// Each end writes and reads at the same time, as host and guest do.
		a, b := net.Pipe()
		ca, cb := NewConn(a), NewConn(b)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for _, c := range []*Conn{ca, cb} {
			wg.Go(func() {
				for _, f := range frames {
					if err := c.Write(f); err != nil {
						errs <- err
						a.Close() // unblock the readers
						b.Close()
						return
					}
				}
			})
			wg.Go(func() {
				for _, tc := range cases {
					got, err := c.Read()
					if err != nil {
						errs <- fmt.Errorf("%s: %w", tc.name, err)
						return
					}
					if err := sameFrame(tc.frame, got); err != nil {
						errs <- fmt.Errorf("%s: %w", tc.name, err)
					}
				}
			})
		}
		wg.Wait()
		a.Close()
		b.Close()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	t.Run("Send", func(t *testing.T) {
		var buf bytes.Buffer
		c := NewConn(&buf)
		exit := &TrialExit{ExitCode: 2, DurationNS: 5}
		if err := c.Send(KindEvent, VerbTrialExit, 0, exit); err != nil {
			t.Fatal(err)
		}
		if err := c.Send(KindEvent, VerbFSData, 0, nil, []byte("abc"), nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Send(KindEvent, VerbTrialDone, 0, nil); err != nil {
			t.Fatal(err)
		}
		f, err := c.Read()
		if err != nil {
			t.Fatal(err)
		}
		var got TrialExit
		if err := f.Decode(&got); err != nil || !reflect.DeepEqual(got, *exit) || f.Verb != VerbTrialExit || f.Bin != nil {
			t.Errorf("trial.exit read as %+v (%v), frame %+v", got, err, f)
		}
		f, err = c.Read()
		if err != nil {
			t.Fatal(err)
		}
		if err := sameFrame(&Frame{Kind: KindEvent, Verb: VerbFSData, Bin: [][]byte{[]byte("abc"), {}}}, f); err != nil {
			t.Error(err)
		}
		f, err = c.Read()
		if err != nil {
			t.Fatal(err)
		}
		if f.Body != nil || f.Verb != VerbTrialDone {
			t.Errorf("trial.done read as %+v", f)
		}
	})
}

// TestWriteDoesNotModifyFrame: NBin goes on the wire, not into the caller's frame.
func TestWriteDoesNotModifyFrame(t *testing.T) {
	f := &Frame{Kind: KindEvent, NBin: 17, Bin: [][]byte{[]byte("a")}}
	data := encode(t, f)
	if f.NBin != 17 {
		t.Errorf("Write changed NBin to %d", f.NBin)
	}
	got, err := readerConn(data).Read()
	if err != nil {
		t.Fatal(err)
	}
	if got.NBin != 1 {
		t.Errorf("NBin on the wire = %d, want len(Bin) = 1", got.NBin)
	}
}

// TestConcurrentSend: several goroutines Send on one Conn while one reader
// reads; every frame must arrive whole, each sender's frames in order. Run with
// -race.
func TestConcurrentSend(t *testing.T) {
	const writers, perWriter = 8, 60
	sizes := []int{0, 1, 1000, 64<<10 - 3, 64 << 10, 200_000}

	type body struct {
		G, Seq int
		Pad    string
	}
	a, b := net.Pipe()
	defer b.Close()
	w, r := NewConn(a), NewConn(b)

	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		wg.Go(func() {
			for seq := range perWriter {
				n := (g + seq) % 4 // 0..3 attachments
				bin := make([][]byte, n)
				for i := range bin {
					bin[i] = pattern(sizes[(g*3+seq+i)%len(sizes)], byte(g*31+seq+i))
				}
				v := body{G: g, Seq: seq, Pad: strings.Repeat("p", (g*seq)%5000)}
				if err := w.Send(KindEvent, "conc", uint64(g)<<32|uint64(seq), v, bin...); err != nil {
					errs <- fmt.Errorf("writer %d: %w", g, err)
					return
				}
			}
		})
	}
	go func() {
		wg.Wait()
		a.Close()
	}()

	next := make([]int, writers)
	for {
		f, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		var v body
		if err := f.Decode(&v); err != nil {
			t.Fatalf("Decode: %v", err)
		}
		g, seq := v.G, v.Seq
		if g < 0 || g >= writers || f.ID != uint64(g)<<32|uint64(seq) || f.Verb != "conc" || f.Kind != KindEvent {
			t.Fatalf("frame %+v does not match its body %+v", f, v)
		}
		if seq != next[g] {
			t.Fatalf("writer %d: got frame %d, want %d", g, seq, next[g])
		}
		next[g]++
		if v.Pad != strings.Repeat("p", (g*seq)%5000) {
			t.Fatalf("writer %d frame %d: body padding damaged", g, seq)
		}
		n := (g + seq) % 4
		if len(f.Bin) != n {
			t.Fatalf("writer %d frame %d: %d attachments, want %d", g, seq, len(f.Bin), n)
		}
		for i, b := range f.Bin {
			if want := pattern(sizes[(g*3+seq+i)%len(sizes)], byte(g*31+seq+i)); !bytes.Equal(b, want) {
				t.Fatalf("writer %d frame %d attachment %d: %d bytes, not the %d written", g, seq, i, len(b), len(want))
			}
		}
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for g, n := range next {
		if n != perWriter {
			t.Errorf("writer %d: read %d frames, want %d", g, n, perWriter)
		}
	}
}

// TestConcurrentWriteSameFrame: one *Frame may be written by several goroutines
// at once (Write only reads it). Run with -race.
func TestConcurrentWriteSameFrame(t *testing.T) {
	f := &Frame{Kind: KindEvent, Verb: "same", Body: json.RawMessage(`{}`), Bin: [][]byte{[]byte("x"), []byte("yz")}}
	var buf bytes.Buffer
	c := NewConn(&buf)
	const n = 8
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := c.Write(f); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i := range n {
		got, err := c.Read()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if err := sameFrame(f, got); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	if _, err := c.Read(); err != io.EOF {
		t.Fatalf("after %d frames: %v, want io.EOF", n, err)
	}
}

// TestReadTruncated: io.EOF only at a frame boundary; a stream ending anywhere
// inside a frame gives io.ErrUnexpectedEOF.
func TestReadTruncated(t *testing.T) {
	f1 := &Frame{ID: 1, Kind: KindReq, Verb: "a", Body: json.RawMessage(`{"k":"v"}`), Bin: [][]byte{[]byte("first"), {}, []byte("third!")}}
	f2 := &Frame{ID: 2, Kind: KindEvent, Verb: "b"}
	f3 := &Frame{ID: 3, Kind: KindResp, Bin: [][]byte{{}}}
	one := encode(t, f1)
	stream := encode(t, f1, f2, f3)
	h1 := 4 + int(binary.BigEndian.Uint32(one)) // end of f1's header

	named := []struct {
		name string
		data []byte
	}{
		{"mid header length (1 byte)", stream[:1]},
		{"mid header length (3 bytes)", stream[:3]},
		{"header length, no header", stream[:4]},
		{"mid header", stream[:4+3]},
		{"header, no attachment length", stream[:h1]},
		{"mid attachment length", stream[:h1+2]},
		{"attachment length, no attachment", stream[:h1+4]},
		{"mid attachment", stream[:h1+4+2]},
		{"mid last attachment length", one[:len(one)-len("third!")-1]},
		{"mid last attachment", one[:len(one)-1]},
		{"second frame mid header length", stream[:len(one)+2]},
		{"last frame's empty attachment length cut", stream[:len(stream)-1]},
	}
	for _, tc := range named {
		t.Run(tc.name, func(t *testing.T) {
			c := readerConn(tc.data)
			var err error
			for err == nil {
				_, err = c.Read()
			}
			if err != io.ErrUnexpectedEOF {
				t.Errorf("Read = %v, want io.ErrUnexpectedEOF", err)
			}
		})
	}

	// Every cut of the stream: exactly the whole frames before the cut are read,
	// then io.EOF if the cut is on a boundary and io.ErrUnexpectedEOF otherwise.
	bounds := map[int]int{0: 0} // offset -> frames before it
	off := 0
	for i, f := range []*Frame{f1, f2, f3} {
		off += len(encode(t, f))
		bounds[off] = i + 1
	}
	for cut := 0; cut <= len(stream); cut++ {
		c := readerConn(stream[:cut])
		n := 0
		var err error
		for {
			if _, err = c.Read(); err != nil {
				break
			}
			n++
		}
		if whole, ok := bounds[cut]; ok {
			if err != io.EOF || n != whole {
				t.Errorf("cut at %d (boundary): %d frames then %v; want %d then io.EOF", cut, n, err, whole)
			}
		} else if err != io.ErrUnexpectedEOF {
			t.Errorf("cut at %d (inside a frame): %d frames then %v; want io.ErrUnexpectedEOF", cut, n, err)
		}
	}
}

// TestReadEmpty: an empty stream is a clean end.
func TestReadEmpty(t *testing.T) {
	if f, err := readerConn(nil).Read(); f != nil || err != io.EOF {
		t.Errorf("Read of empty stream = %v, %v; want nil, io.EOF", f, err)
	}
}

type failReader struct {
	data []byte
	err  error
}

func (r *failReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestReadStreamError: an error of the stream other than EOF is passed on,
// wherever it happens.
func TestReadStreamError(t *testing.T) {
	boom := errors.New("boom")
	stream := encode(t, &Frame{Kind: KindEvent, Bin: [][]byte{[]byte("abcdef")}})
	for _, cut := range []int{0, 2, 4, 10, len(stream) - 3} {
		c := NewConn(rw{&failReader{data: stream[:cut], err: boom}, io.Discard})
		if _, err := c.Read(); !errors.Is(err, boom) {
			t.Errorf("cut at %d: Read = %v, want %v", cut, err, boom)
		}
	}
}

// TestReadMalformed: malformed or out-of-bounds input gives an error wrapping
// ErrProtocol, even when the stream ends right after the offending part.
func TestReadMalformed(t *testing.T) {
	ok := `{"kind":"event","nbin":1}`
	cases := []struct {
		name string
		data []byte
	}{
		{"header length 0xFFFFFFFF, then nothing", u32(0xFFFFFFFF)},
		{"header length MaxHeader+1, then nothing", u32(MaxHeader + 1)},
		{"header length 1<<31, then nothing", u32(1 << 31)},
		{"empty header", u32(0)},
		{"header not JSON", raw("hello")},
		{"header truncated JSON", raw(`{"kind":"req"`)},
		{"header JSON with trailing garbage", raw(`{"kind":"req"}x`)},
		{"header two JSON values", raw(`{"kind":"req"}{"kind":"req"}`)},
		{"header JSON array", raw(`[1,2]`)},
		{"header JSON string", raw(`"req"`)},
		{"header JSON null", raw(`null`)},
		{"header empty object", raw(`{}`)},
		{"unknown kind", raw(`{"kind":"bogus"}`)},
		{"kind in upper case", raw(`{"kind":"REQ"}`)},
		{"kind empty", raw(`{"kind":""}`)},
		{"kind not a string", raw(`{"kind":1}`)},
		{"id negative", raw(`{"kind":"req","id":-1}`)},
		{"id too large", raw(`{"kind":"req","id":18446744073709551616}`)},
		{"id fractional", raw(`{"kind":"req","id":1.5}`)},
		{"nbin negative", raw(`{"kind":"req","nbin":-1}`)},
		{"nbin very negative", raw(`{"kind":"req","nbin":-9223372036854775808}`)},
		{"nbin MaxAttachments+1", raw(fmt.Sprintf(`{"kind":"req","nbin":%d}`, MaxAttachments+1))},
		{"nbin huge", raw(`{"kind":"req","nbin":1099511627776}`)},
		{"nbin overflowing int", raw(`{"kind":"req","nbin":99999999999999999999}`)},
		{"nbin a string", raw(`{"kind":"req","nbin":"1"}`)},
		{"nbin fractional", raw(`{"kind":"req","nbin":1.5}`)},
		{"body invalid JSON", raw(`{"kind":"req","body":{]}`)},
		{"attachment length MaxAttachment+1, then nothing", append(raw(ok), u32(MaxAttachment+1)...)},
		{"attachment length 0xFFFFFFFF, then nothing", append(raw(ok), u32(0xFFFFFFFF)...)},
		{"second attachment too large", append(raw(`{"kind":"resp","nbin":2}`, []byte("fine")), u32(MaxAttachment+1)...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := readerConn(tc.data).Read()
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("Read = %+v, %v; want an ErrProtocol error", f, err)
			}
			if f != nil {
				t.Errorf("Read returned a frame with its error: %+v", f)
			}
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				t.Errorf("error %v also claims EOF", err)
			}
		})
	}
}

// TestReadRejectsBeforeAllocating: an oversize length is refused before a
// buffer of that size is made.
func TestReadRejectsBeforeAllocating(t *testing.T) {
	cases := []struct {
		name string
		data []byte
	}{
		{"header", u32(0xFFFFFFFF)},
		{"header just over", u32(MaxHeader + 1)},
		{"attachment", append(raw(`{"kind":"event","nbin":1}`), u32(0xFFFFFFFF)...)},
		{"attachment just over", append(raw(`{"kind":"event","nbin":1}`), u32(MaxAttachment+1)...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := readerConn(tc.data)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := c.Read()
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("Read = %v, want an ErrProtocol error", err)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
				t.Errorf("Read allocated %d bytes before refusing the length", n)
			}
		})
	}
}

// TestWriteRefuses: frames the peer would reject are refused with ErrProtocol
// before anything is written, and the Conn stays usable.
func TestWriteRefuses(t *testing.T) {
	tooMany := make([][]byte, MaxAttachments+1)
	cases := []struct {
		name  string
		frame *Frame
	}{
		{"too many attachments", &Frame{Kind: KindEvent, Bin: tooMany}},
		{"far too many attachments", &Frame{Kind: KindEvent, Bin: make([][]byte, 1000)}},
		{"attachment of MaxAttachment+1", &Frame{Kind: KindEvent, Bin: [][]byte{make([]byte, MaxAttachment+1)}}},
		{"last attachment too large", &Frame{Kind: KindEvent, Bin: [][]byte{nil, []byte("ok"), make([]byte, 2*MaxAttachment)}}},
		{"header of MaxHeader+1", headerOfSize(t, MaxHeader+1)},
		{"unknown kind", &Frame{Kind: "bogus"}},
		{"empty kind", &Frame{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			c := NewConn(&buf)
			if err := c.Write(tc.frame); !errors.Is(err, ErrProtocol) {
				t.Fatalf("Write = %v, want an ErrProtocol error", err)
			}
			if buf.Len() != 0 {
				t.Fatalf("refused Write put %d bytes on the stream", buf.Len())
			}
			good := &Frame{Kind: KindResp, ID: 1, Bin: [][]byte{[]byte("after")}}
			if err := c.Write(good); err != nil {
				t.Fatalf("Write after a refusal: %v", err)
			}
			got, err := c.Read()
			if err != nil {
				t.Fatal(err)
			}
			if err := sameFrame(good, got); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("Send of a body that does not marshal", func(t *testing.T) {
		var buf bytes.Buffer
		c := NewConn(&buf)
		err := c.Send(KindEvent, "x", 0, make(chan int))
		if err == nil || errors.Is(err, ErrProtocol) {
			t.Fatalf("Send = %v, want an encoding error", err)
		}
		if buf.Len() != 0 {
			t.Fatalf("failed Send put %d bytes on the stream", buf.Len())
		}
	})
	t.Run("Send with too many attachments", func(t *testing.T) {
		var buf bytes.Buffer
		if err := NewConn(&buf).Send(KindEvent, "x", 0, nil, tooMany...); !errors.Is(err, ErrProtocol) || buf.Len() != 0 {
			t.Fatalf("Send = %v with %d bytes written; want an ErrProtocol error and none", err, buf.Len())
		}
	})
}

// TestWriteStreamError: a failing stream's error reaches the writer.
func TestWriteStreamError(t *testing.T) {
	a, b := net.Pipe()
	b.Close()
	c := NewConn(a)
	if err := c.Write(&Frame{Kind: KindEvent}); err == nil {
		t.Fatal("Write on a closed pipe succeeded")
	}
	if err := c.Write(&Frame{Kind: KindEvent}); err == nil {
		t.Fatal("second Write on a closed pipe succeeded")
	}
	a.Close()
}

func TestDecode(t *testing.T) {
	type opt struct {
		A int `json:"a"`
		P *int
	}
	cases := []struct {
		name    string
		body    string
		into    func() any
		wantErr bool
		want    any
	}{
		{"hello", `{"version":1,"role":"r"}`, func() any { return new(Hello) }, false, &Hello{Version: 1, Role: "r"}},
		{"remote error", `{"code":"c","message":"m"}`, func() any { return new(RemoteError) }, false, &RemoteError{Code: "c", Message: "m"}},
		{"partial fields", `{"version":1}`, func() any { return new(Hello) }, false, &Hello{Version: 1}},
		{"spaces around", " \n{\"version\":2} \t", func() any { return new(Hello) }, false, &Hello{Version: 2}},
		{"into a map", `{"x":1}`, func() any { return new(map[string]int) }, false, &map[string]int{"x": 1}},
		{"unknown field", `{"version":1,"role":"r","extra":true}`, func() any { return new(Hello) }, true, nil},
		{"unknown nested field", `{"mounts":[{"path":"/","ro":true}]}`, func() any { return new(TrialStart) }, true, nil},
		{"empty body", ``, func() any { return new(Hello) }, true, nil},
		{"blank body", `   `, func() any { return new(Hello) }, true, nil},
		{"null body", `null`, func() any { return new(Hello) }, true, nil},
		{"wrong type", `{"version":"one"}`, func() any { return new(Hello) }, true, nil},
		{"not an object", `[1]`, func() any { return new(Hello) }, true, nil},
		{"invalid JSON", `{"version":`, func() any { return new(Hello) }, true, nil},
		{"trailing value", `{"version":1}{"version":2}`, func() any { return new(Hello) }, true, nil},
		{"trailing garbage", `{"version":1}}`, func() any { return new(Hello) }, true, nil},
		{"null field", `{"a":1,"P":null}`, func() any { return new(opt) }, false, &opt{A: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &Frame{Kind: KindEvent, Verb: "v", Body: json.RawMessage(tc.body)}
			v := tc.into()
			err := f.Decode(v)
			if tc.wantErr {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("Decode = %v, want an ErrProtocol error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := mustJSON(t, v), mustJSON(t, tc.want); !bytes.Equal(got, want) {
				t.Errorf("decoded %s, want %s", got, want)
			}
		})
	}

	t.Run("nil body", func(t *testing.T) {
		if err := (&Frame{Kind: KindReq}).Decode(new(Hello)); !errors.Is(err, ErrProtocol) {
			t.Fatalf("Decode = %v, want an ErrProtocol error", err)
		}
	})
}

func TestRemoteError(t *testing.T) {
	var err error = &RemoteError{Code: "denied", Message: "no"}
	if err.Error() != "denied: no" {
		t.Errorf("Error() = %q", err.Error())
	}
}

// normBody is what Write makes of a body read from the wire: encoding/json
// compacts a json.RawMessage and escapes <, >, &, U+2028 and U+2029 in it.
func normBody(b json.RawMessage) (json.RawMessage, error) {
	if b == nil {
		return nil, nil
	}
	var c bytes.Buffer
	if err := json.Compact(&c, b); err != nil {
		return nil, err
	}
	var e bytes.Buffer
	json.HTMLEscape(&e, c.Bytes())
	return e.Bytes(), nil
}

func fuzzSeeds(tb testing.TB) [][]byte {
	big := &Frame{Kind: KindEvent, Verb: VerbFSData, Bin: [][]byte{pattern(3000, 1)}}
	valid := [][]byte{
		encode(tb, &Frame{Kind: KindHello, Body: mustJSON(tb, Hello{Version: Version, Role: "ns-trial"})}),
		encode(tb, &Frame{ID: 1, Kind: KindReq, Verb: VerbTrialStart, Body: mustJSON(tb, TrialStart{Mounts: []MountSpec{{Path: "/"}}})}),
		encode(tb, &Frame{ID: 2, Kind: KindReq, Verb: VerbTrialRun, Body: mustJSON(tb, TrialRun{Argv: []string{"true"}})}),
		encode(tb, &Frame{ID: 1, Kind: KindErr, Body: mustJSON(tb, RemoteError{Code: "x", Message: "<y>"})}),
		encode(tb, &Frame{Kind: KindResp, ID: 2, Bin: [][]byte{nil, []byte("ab"), {}}}),
		encode(tb, big),
		encode(tb,
			&Frame{Kind: KindEvent, Verb: VerbTrialExit, Body: mustJSON(tb, TrialExit{ExitCode: 1})},
			&Frame{Kind: KindEvent, Verb: VerbFSData, Bin: [][]byte{[]byte("data")}},
			&Frame{Kind: KindEvent, Verb: VerbTrialDone}),
		raw(`{"kind":"event", "body": { "a" : [1, 2.50, "\u003c\/"] }, "extra": 1, "KIND":"resp"}`),
		raw("{\"kind\":\"req\",\"verb\":\"\xff\xfe\u2028\",\"body\":\"\xc3\x28\u2029\"}"),
	}
	seeds := append([][]byte(nil), valid...)
	for _, v := range valid {
		for _, cut := range []int{1, 3, 4, 5, len(v) / 2, len(v) - 1} {
			if cut < len(v) {
				seeds = append(seeds, v[:cut])
			}
		}
	}
	seeds = append(seeds,
		nil,
		u32(0xFFFFFFFF),
		u32(0),
		raw(`{"kind":"req","nbin":-1}`),
		raw(`{"kind":"req","nbin":65}`),
		append(raw(`{"kind":"event","nbin":1}`), u32(MaxAttachment+1)...),
		raw(`{"kind":"nope"}`),
		raw(`not json`),
	)
	return seeds
}

// TestFuzzSeeds runs the fuzz property over the seeds on every go test.
func TestFuzzSeeds(t *testing.T) {
	for i, s := range fuzzSeeds(t) {
		if err := checkRead(s); err != nil {
			t.Errorf("seed %d (%q): %v", i, s, err)
		}
	}
}

// FuzzRead feeds arbitrary bytes to Conn.Read until it fails. It must not
// panic, must fail only with io.EOF, io.ErrUnexpectedEOF or an ErrProtocol
// error, and every frame it returns must re-encode with Write and read back
// equal.
func FuzzRead(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := checkRead(data); err != nil {
			t.Fatal(err)
		}
	})
}

func checkRead(data []byte) error {
	c := readerConn(data)
	for i := 0; ; i++ {
		f, err := c.Read()
		if err != nil {
			if f != nil {
				return fmt.Errorf("frame %d: Read returned a frame with error %v", i, err)
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF || errors.Is(err, ErrProtocol) {
				return nil
			}
			return fmt.Errorf("frame %d: unexpected error %T %v", i, err, err)
		}
		if err := checkFrame(f); err != nil {
			return fmt.Errorf("frame %d: %v", i, err)
		}
		if i > len(data) {
			return fmt.Errorf("read %d frames from %d bytes", i, len(data))
		}
	}
}

// checkFrame checks the bounds of a frame read and that it re-encodes and
// reads back equal.
func checkFrame(f *Frame) error {
	if !validKind(f.Kind) {
		return fmt.Errorf("read a frame of unknown kind %q", f.Kind)
	}
	if f.NBin != len(f.Bin) || len(f.Bin) > MaxAttachments {
		return fmt.Errorf("NBin %d with %d attachments", f.NBin, len(f.Bin))
	}
	for i, b := range f.Bin {
		if len(b) > MaxAttachment || b == nil {
			return fmt.Errorf("attachment %d: %d bytes (nil %v)", i, len(b), b == nil)
		}
	}
	if f.Body != nil && !json.Valid(f.Body) {
		return fmt.Errorf("body %q is not valid JSON", f.Body)
	}
	var buf bytes.Buffer
	c := NewConn(&buf)
	if err := c.Write(f); err != nil {
		// Re-encoding may grow a header (U+FFFD for invalid UTF-8, \u003c for
		// <, ...): only a header that was already near the limit may fail.
		if h, _ := json.Marshal(f); errors.Is(err, ErrProtocol) && len(h) > MaxHeader {
			return nil
		}
		return fmt.Errorf("re-encoding %+v: %v", f, err)
	}
	encoded := bytes.Clone(buf.Bytes())
	g, err := c.Read()
	if err != nil {
		return fmt.Errorf("reading back: %v", err)
	}
	if _, err := c.Read(); err != io.EOF {
		return fmt.Errorf("after the frame read back: %v, want io.EOF", err)
	}
	want := *f
	if want.Body, err = normBody(f.Body); err != nil {
		return fmt.Errorf("normalising body: %v", err)
	}
	if err := sameFrame(&want, g); err != nil {
		return fmt.Errorf("read back differently: %v", err)
	}
	// What was read back is a fixed point: encoding it again gives the same bytes.
	if err := c.Write(g); err != nil {
		return fmt.Errorf("re-encoding the frame read back: %v", err)
	}
	if !bytes.Equal(buf.Bytes(), encoded) {
		return fmt.Errorf("second re-encoding %q differs from the first %q", buf.Bytes(), encoded)
	}
	return nil
}

// BenchmarkRoundTrip writes frames on one end of a pipe and reads them on the
// other; MB/s counts the encoded frame.
func BenchmarkRoundTrip(b *testing.B) {
	frames := []struct {
		name  string
		frame *Frame
	}{
		{"attachment-1MiB", &Frame{Kind: KindEvent, Verb: VerbFSData, Bin: [][]byte{pattern(MaxAttachment, 3)}}},
		{"header-only", &Frame{ID: 42, Kind: KindResp, Verb: "stat", Body: json.RawMessage(`{"path":"/etc/hosts","size":123,"mode":420}`)}},
	}
	pipes := []struct {
		name string
		open func(b *testing.B) (r, w io.ReadWriteCloser)
	}{
		{"os.Pipe", func(b *testing.B) (io.ReadWriteCloser, io.ReadWriteCloser) {
			r, w, err := os.Pipe()
			if err != nil {
				b.Fatal(err)
			}
			return r, w
		}},
		{"net.Pipe", func(*testing.B) (io.ReadWriteCloser, io.ReadWriteCloser) {
			r, w := net.Pipe()
			return r, w
		}},
	}
	for _, p := range pipes {
		for _, fr := range frames {
			b.Run(p.name+"/"+fr.name, func(b *testing.B) {
				r, w := p.open(b)
				defer r.Close()
				wc, rc := NewConn(w), NewConn(r)
				b.SetBytes(int64(len(encode(b, fr.frame))))
				b.ReportAllocs()
				errc := make(chan error, 1)
				b.ResetTimer()
				go func() {
					defer w.Close()
					for range b.N {
						if err := wc.Write(fr.frame); err != nil {
							errc <- err
							return
						}
					}
					errc <- nil
				}()
				for range b.N {
					if _, err := rc.Read(); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// A handler whose answer is too large to frame must still answer: the caller
// gets a RemoteError instead of waiting forever.
func TestPeerOversizedAnswerIsAnError(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	server := NewPeer(NewConn(a), func(ctx context.Context, f *Frame) (any, [][]byte, error) {
		return map[string]string{"big": strings.Repeat("x", MaxHeader)}, nil, nil
	})
	client := NewPeer(NewConn(b), nil)
	go server.Run(context.Background())
	go client.Run(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := client.Call(ctx, "big", nil)
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != "too_large" {
		t.Fatalf("got %v, want a too_large RemoteError", err)
	}
}

func TestStubRequest(t *testing.T) {
	bad := []*TrialRun{
		{Argv: []string{"a\x00b"}, Cwd: "/"},
		{Argv: []string{"a"}, Env: []string{"X=\x00"}, Cwd: "/"},
		{Argv: []string{"a"}, Cwd: "/\x00"},
		{Cwd: "/"},
		{Argv: []string{""}, Cwd: "/"},
	}
	for _, r := range bad {
		if _, err := StubRequest(r); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("StubRequest(%+v) = %v, want EINVAL", r, err)
		}
	}
	// A good one: header, then program, cwd, argv, env, each NUL-ended.
	b, err := StubRequest(&TrialRun{Argv: []string{"sh", "-c", ""}, Env: []string{"A=1"}, Cwd: "/w", Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	var h StubHeader
	n := binary.Size(h)
	if _, err := binary.Decode(b[:n], binary.NativeEndian, &h); err != nil {
		t.Fatal(err)
	}
	strs := "sh\x00/w\x00sh\x00-c\x00\x00A=1\x00"
	if h != (StubHeader{Magic: StubMagic, Flags: StubFlagStdin, Argc: 3, Envc: 1, Size: uint64(len(strs))}) || string(b[n:]) != strs {
		t.Fatalf("header %+v strings %q", h, b[n:])
	}
}
