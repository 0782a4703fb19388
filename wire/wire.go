// Package wire owns the framing spoken between the host side of dryexec and the
// guest supervisor inside a boundary: length-prefixed frames, each a JSON header
// followed by binary attachments, so that file contents never go through JSON.
//
// Frame layout on the stream:
//
//	u32 big-endian header length | header JSON | for each of header.nbin: u32 length | bytes
//
// Every size is bounded (see the limits below) and checked before anything is
// allocated, so a hostile or broken peer can make a read fail but never make it
// allocate without bound or hang past the underlying stream's own deadline.
package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Version is the protocol version carried in the guest's hello. A host
// refuses a guest of another version (a stale dryexec-guest beside a newer
// dryexec). 2: the command stub (trial.joined, StubFD). 3: fs.hole. 4: an
// ns trial.exit may carry EndMonoNS instead of DurationNS. 6: trial.ready.
const Version = 6

// Limits. A header is small metadata; attachments carry bulk bytes in bounded
// chunks so that neither side ever buffers a whole large file.
const (
	// MaxHeader bounds one JSON header. Entries with long paths and env values
	// fit comfortably; anything larger is a broken or hostile peer.
	MaxHeader = 1 << 20
	// MaxAttachment bounds one attachment; senders chunk larger payloads.
	MaxAttachment = 1 << 20
	// MaxAttachments bounds attachments per frame.
	MaxAttachments = 64
)

// Frame kinds.
const (
	KindHello = "hello" // first frame from the guest: body is Hello
	KindReq   = "req"   // a request; the peer answers with resp or err with the same ID
	KindResp  = "resp"
	KindErr   = "err"   // body is RemoteError
	KindEvent = "event" // one-way; no answer
)

// ErrProtocol marks a malformed or out-of-bounds frame: the transport is unusable.
var ErrProtocol = errors.New("wire: protocol error")

// Frame is one message.
type Frame struct {
	ID   uint64          `json:"id,omitempty"`
	Kind string          `json:"kind"`
	Verb string          `json:"verb,omitempty"`
	Body json.RawMessage `json:"body,omitempty"`
	NBin int             `json:"nbin,omitempty"`
	// Bin holds the attachments. Write puts len(Bin) on the wire as nbin (f
	// itself is not modified); Read sets NBin to len(Bin).
	Bin [][]byte `json:"-"`
}

// Decode unmarshals f.Body into v, rejecting unknown fields, trailing data and
// an absent or null body.
func (f *Frame) Decode(v any) error {
	if b := bytes.TrimSpace(f.Body); len(b) == 0 || string(b) == "null" {
		return fmt.Errorf("%w: %s %q has no body", ErrProtocol, f.Kind, f.Verb)
	}
	dec := json.NewDecoder(bytes.NewReader(f.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: decoding %s %q: %v", ErrProtocol, f.Kind, f.Verb, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: decoding %s %q: trailing data after body", ErrProtocol, f.Kind, f.Verb)
	}
	return nil
}

// validKind reports whether k is one of the Kind constants.
func validKind(k string) bool {
	switch k {
	case KindHello, KindReq, KindResp, KindErr, KindEvent:
		return true
	}
	return false
}

// Hello is the guest's first frame.
type Hello struct {
	Version int    `json:"version"`
	Role    string `json:"role"`
}

// RemoteError is an error the peer reported; the transport itself is fine.
type RemoteError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *RemoteError) Error() string { return e.Code + ": " + e.Message }

// Conn reads and writes frames on one stream. Reads and writes may run
// concurrently with each other; concurrent writers are serialised by wmu.
type Conn struct {
	r *bufio.Reader

	wmu sync.Mutex // guards w and hdr
	w   *bufio.Writer
	hdr [4]byte
}

// NewConn wraps rw.
func NewConn(rw io.ReadWriter) *Conn {
	return &Conn{r: bufio.NewReaderSize(rw, 64<<10), w: bufio.NewWriterSize(rw, 64<<10)}
}

// Write sends f, with its attachments, and flushes. A frame the peer would
// reject (unknown kind, too many or too large attachments, too large a header)
// is refused with an ErrProtocol error before anything is written, so the
// stream stays usable. f is only read, so one frame may be written by several
// goroutines at once.
func (c *Conn) Write(f *Frame) error {
	if !validKind(f.Kind) {
		return fmt.Errorf("%w: unknown frame kind %q", ErrProtocol, f.Kind)
	}
	if len(f.Bin) > MaxAttachments {
		return fmt.Errorf("%w: %d attachments (max %d)", ErrProtocol, len(f.Bin), MaxAttachments)
	}
	for _, b := range f.Bin {
		if len(b) > MaxAttachment {
			return fmt.Errorf("%w: attachment of %d bytes (max %d)", ErrProtocol, len(b), MaxAttachment)
		}
	}
	hf := *f // not f.NBin = ...: f may be shared with other writers
	hf.NBin = len(f.Bin)
	h, err := json.Marshal(&hf)
	if err != nil {
		return fmt.Errorf("wire: encoding header: %w", err)
	}
	if len(h) > MaxHeader {
		return fmt.Errorf("%w: header of %d bytes (max %d)", ErrProtocol, len(h), MaxHeader)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writeChunk(h); err != nil {
		return err
	}
	for _, b := range f.Bin {
		if err := c.writeChunk(b); err != nil {
			return err
		}
	}
	return c.w.Flush()
}

func (c *Conn) writeChunk(b []byte) error {
	binary.BigEndian.PutUint32(c.hdr[:], uint32(len(b)))
	if _, err := c.w.Write(c.hdr[:]); err != nil {
		return err
	}
	_, err := c.w.Write(b)
	return err
}

// Send is Write of a frame whose body is v marshalled.
func (c *Conn) Send(kind, verb string, id uint64, v any, bin ...[]byte) error {
	var body json.RawMessage
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("wire: encoding %s body: %w", verb, err)
		}
		body = b
	}
	return c.Write(&Frame{ID: id, Kind: kind, Verb: verb, Body: body, Bin: bin})
}

// Prime builds encoding/json's codecs for the types of vs (pointers to
// values of each type a peer will send or receive), so that their first
// frame does not pay for them. encoding/json builds a type's encoder and
// decoder by reflection on first use: ≈ 0.05–0.1 ms apiece on this
// project's VMs, on a trial's path in a freshly started guest unless it is
// done while the sandbox waits. Prime's own errors do not matter.
func Prime(vs ...any) {
	for _, v := range vs {
		b, _ := json.Marshal(v)
		json.Unmarshal(b, v)
	}
}

// Read returns the next frame. io.EOF is returned only at a clean frame boundary;
// a stream that ends inside a frame gives io.ErrUnexpectedEOF.
func (c *Conn) Read() (*Frame, error) {
	h, err := c.readChunk(MaxHeader, true)
	if err != nil {
		return nil, err
	}
	f := new(Frame)
	if err := json.Unmarshal(h, f); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrProtocol, err)
	}
	if !validKind(f.Kind) {
		return nil, fmt.Errorf("%w: unknown frame kind %q", ErrProtocol, f.Kind)
	}
	if f.NBin < 0 || f.NBin > MaxAttachments {
		return nil, fmt.Errorf("%w: %d attachments (max %d)", ErrProtocol, f.NBin, MaxAttachments)
	}
	if f.NBin > 0 {
		f.Bin = make([][]byte, f.NBin)
		for i := range f.Bin {
			if f.Bin[i], err = c.readChunk(MaxAttachment, false); err != nil {
				return nil, err
			}
		}
	}
	return f, nil
}

func (c *Conn) readChunk(max int, first bool) ([]byte, error) {
	var lb [4]byte
	if _, err := io.ReadFull(c.r, lb[:]); err != nil {
		if err == io.EOF && first {
			return nil, io.EOF
		}
		return nil, unexpected(err)
	}
	n := binary.BigEndian.Uint32(lb[:])
	if uint64(n) > uint64(max) {
		return nil, fmt.Errorf("%w: chunk of %d bytes (max %d)", ErrProtocol, n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.r, b); err != nil {
		return nil, unexpected(err)
	}
	return b, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
