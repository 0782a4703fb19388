package receipt

import (
	"fmt"
	"testing"

	"github.com/dryexec/dryexec"
)

// BenchmarkSign signs a delta of 10,000 file changes (the cost `dryexec run`
// adds after a large trial): encode, canonicalise, hash, sign.
//
//	go test ./receipt -run '^$' -bench Sign
func BenchmarkSign(b *testing.B) {
	s, err := LoadOrCreate(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	d := sampleDelta()
	for i := range 10000 {
		d.Files = append(d.Files, dryexec.FileChange{Path: fmt.Sprintf("/w/build/obj/f%d.o", i), Op: dryexec.OpCreate,
			Kind: dryexec.KindFile, Size: 1024, Mode: "0644", SHA256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"})
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Sign(d); err != nil {
			b.Fatal(err)
		}
	}
}
