package fsdelta

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/wire"
)

// hookReader reads r and calls at once, before its first read: a marker for
// "time passes while this file is being hashed" without sleeping.
type hookReader struct {
	r  io.Reader
	at func()
}

func (h *hookReader) Read(p []byte) (int, error) {
	if h.at != nil {
		h.at()
		h.at = nil
	}
	return h.r.Read(p)
}

// endless is content that a stream says is n bytes long and that must never be
// read whole (a sparse file of exabytes): reading more than max is noted
// (overread) and fails the read; Discard skips it.
type endless struct {
	n, max              int64
	discarded, overread bool
}

func (e *endless) Read(p []byte) (int, error) {
	k := min(int64(len(p)), e.n)
	if k == 0 {
		return 0, io.EOF
	}
	if e.max -= k; e.max < 0 {
		e.overread = true
		return 0, errors.New("read far more of a huge file than could be hashed in time")
	}
	clear(p[:k])
	e.n -= k
	return int(k), nil
}

func (e *endless) Discard() error { e.discarded, e.n = true, 0; return nil }

// notKeptSink refuses every blob past the first, reading it whole, as the
// store does past a cap.
type notKeptSink struct{ n int }

func (s *notKeptSink) PutBlob(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", n, err
	}
	s.n++
	if s.n > 1 {
		return hex.EncodeToString(h.Sum(nil)), n, &dryexec.ContentNotKeptError{Reason: "cap reached"}
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// TestContentDeadline: past the Differ's deadline a file is listed with its
// size and marked not kept (no hash: it was cut short), every file after it
// too, host files are not hashed, and Expired says the delta is incomplete.
// A file too large to hash in the time left is not tried at all: the files
// after it are hashed as usual, and nothing is incomplete.
func TestContentDeadline(t *testing.T) {
	lower := t.TempDir()
	must(t, os.WriteFile(filepath.Join(lower, "host"), []byte("host content"), 0o644))
	type add struct {
		path    string
		content func(d *Differ) io.Reader
		size    int64
	}
	str := func(s string) func(*Differ) io.Reader {
		return func(*Differ) io.Reader { return strings.NewReader(s) }
	}
	// expires makes the deadline pass as the file starts to be read.
	expires := func(s string) func(*Differ) io.Reader {
		return func(d *Differ) io.Reader {
			return &hookReader{r: strings.NewReader(s), at: func() { d.SetDeadline(time.Now().Add(-time.Second)) }}
		}
	}
	var huge *endless
	tests := []struct {
		name    string
		adds    []add
		kept    map[string]bool // path → content kept (and hashed)
		reason  string          // of the files not kept
		expired bool
	}{
		{"deadline passes while hashing", []add{
			{"a", str("first"), 5},
			{"b", expires("cut short"), 9},
			{"c", str("after"), 5},
			{"host", str("changed on the host"), 19},
		}, map[string]bool{"a": true, "b": false, "c": false, "host": false}, "deadline", true},
		{"too large to try", []add{
			{"a", func(*Differ) io.Reader { huge = &endless{n: 1 << 62, max: 1 << 20}; return huge }, 1 << 62},
			{"b", str("after"), 5},
		}, map[string]bool{"a": false, "b": true}, "could not end by the trial's deadline", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDiffer([]Mount{{Path: lower}}, nil, 0)
			defer d.Close()
			d.SetDeadline(time.Now().Add(time.Minute))
			for _, a := range tt.adds {
				if err := d.Add(&wire.FSEntry{Path: a.path, Kind: wire.EntryFile, Mode: 0o644, Size: a.size}, a.content(d)); err != nil {
					t.Fatalf("Add %s: %v (huge file read: %v)", a.path, err, huge != nil && huge.overread)
				}
			}
			changes, err := d.Finish()
			if err != nil {
				t.Fatal(err)
			}
			if len(changes) != len(tt.kept) {
				t.Fatalf("changes: %+v", changes)
			}
			for _, c := range changes {
				rel := strings.TrimPrefix(c.Path, lower+"/")
				kept := tt.kept[rel]
				if c.Kept() != kept || (c.SHA256 != "") != kept {
					t.Errorf("%s: kept %v sha %q, want kept %v", rel, c.Kept(), c.SHA256, kept)
				}
				if !kept && !strings.Contains(c.ContentReason, tt.reason) {
					t.Errorf("%s: reason %q, want it to say %q", rel, c.ContentReason, tt.reason)
				}
				if c.Size <= 0 {
					t.Errorf("%s: size %d, want the file's", rel, c.Size)
				}
				if rel == "host" && c.BeforeSHA256 != "" {
					t.Errorf("host file hashed past the deadline: %+v", c)
				}
			}
			if d.Expired() != tt.expired {
				t.Errorf("Expired %v, want %v", d.Expired(), tt.expired)
			}
			if huge != nil && (!huge.discarded || huge.overread) {
				t.Errorf("the huge file's content was read (%v), not skipped with Discard (%v)", huge.overread, huge.discarded)
			}
			huge = nil
		})
	}
}

// TestContentNotKeptByTheStore: a blob the sink refuses with a
// ContentNotKeptError still has its hash and size in the delta, marked not
// kept with the sink's reason; the trial goes on.
func TestContentNotKeptByTheStore(t *testing.T) {
	lower := t.TempDir()
	d := NewDiffer([]Mount{{Path: lower}}, &notKeptSink{}, 0)
	defer d.Close()
	for _, p := range []string{"a", "b"} {
		if err := d.Add(&wire.FSEntry{Path: p, Kind: wire.EntryFile, Mode: 0o644, Size: 5}, strings.NewReader("x"+p+"yzw")); err != nil {
			t.Fatalf("Add %s: %v", p, err)
		}
	}
	changes, err := d.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 2 || !changes[0].Kept() || changes[1].Kept() || changes[1].ContentReason != "cap reached" ||
		changes[1].SHA256 != sha("xbyzw") || changes[1].Size != 5 || d.Expired() {
		t.Fatalf("changes: %+v", changes)
	}
}
