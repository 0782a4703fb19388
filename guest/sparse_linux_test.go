package guest

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/wire"
)

// TestSendContentSparse: a file's holes go on the stream as fs.hole frames
// (their length only), its data as fs.data, in order, adding up to the
// file's size: a sparse file costs the stream what it holds, not its size.
func TestSendContentSparse(t *testing.T) {
	const mib = 1 << 20
	type extent struct {
		off  int64
		data string
	}
	tests := []struct {
		name     string
		size     int64
		extents  []extent
		maxData  int64 // bytes of fs.data at most (the filesystem's block granularity)
		minHoles int64
	}{
		{"all hole", 100 << 30, nil, 0, 100 << 30},
		{"largest file", 1<<63 - 1, []extent{{1 << 40, "x"}}, 64 << 10, 1<<63 - 1 - (64 << 10)},
		{"data in the middle", 64 * mib, []extent{{32 * mib, "middle"}}, 64 << 10, 64*mib - (64 << 10)},
		{"data at both ends", 64 * mib, []extent{{0, "start"}, {64*mib - 3, "end"}}, 128 << 10, 64*mib - (128 << 10)},
		{"no holes", 3 * mib, []extent{{0, string(bytes.Repeat([]byte("d"), 3*mib))}}, 3 * mib, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "f")
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			want := map[int64]string{}
			for _, e := range tt.extents {
				if _, err := f.WriteAt([]byte(e.data), e.off); err != nil {
					t.Fatal(err)
				}
				want[e.off] = e.data
			}
			if err := f.Truncate(tt.size); err != nil {
				testreq.Needf(t, testreq.Kernel, "large sparse files", err)
			}
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			sent := make(chan error, 1)
			go func() {
				sent <- sendContent(wire.NewConn(a), f, tt.size, make([]byte, wire.MaxAttachment))
				a.Close()
			}()
			in := wire.NewConn(b)
			var off, data, holes int64
			got := map[int64]string{}
			for off < tt.size {
				fr, err := in.Read()
				if err != nil {
					t.Fatalf("at %d of %d: %v", off, tt.size, err)
				}
				switch fr.Verb {
				case wire.VerbFSHole:
					var h wire.FSHole
					if err := fr.Decode(&h); err != nil || h.N <= 0 {
						t.Fatalf("bad hole %+v: %v", h, err)
					}
					off, holes = off+h.N, holes+h.N
				case wire.VerbFSData:
					b := fr.Bin[0]
					// What the data frames hold where each extent starts is
					// the file's (up to the frame's end).
					for eo, ed := range want {
						if eo >= off && eo < off+int64(len(b)) {
							got[eo] = string(b[eo-off : min(eo-off+int64(len(ed)), int64(len(b)))])
						}
					}
					off, data = off+int64(len(b)), data+int64(len(b))
				default:
					t.Fatalf("unexpected frame %q", fr.Verb)
				}
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			if _, err := in.Read(); err != io.EOF && err != io.ErrUnexpectedEOF && err == nil {
				t.Fatal("frames after the content")
			}
			if off != tt.size || data > tt.maxData || holes < tt.minHoles {
				t.Errorf("sent %d bytes: %d of data (at most %d), %d of holes (at least %d)", off, data, tt.maxData, holes, tt.minHoles)
			}
			for eo, ed := range want {
				if g := got[eo]; g == "" || g != ed[:len(g)] {
					t.Errorf("extent at %d: got %.20q, want %.20q", eo, got[eo], ed)
				}
			}
		})
	}
}
