package fsdelta

import (
	"reflect"
	"testing"

	"github.com/dryexec/dryexec"
)

// TestSpoolCodecEveryField: every field of FileChange survives the spool's
// encoding. It sets each field in turn (by reflection, so that a field added
// to FileChange later is covered without editing this test) and fails when
// the codec drops it.
func TestSpoolCodecEveryField(t *testing.T) {
	typ := reflect.TypeFor[dryexec.FileChange]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			var c dryexec.FileChange
			v := reflect.ValueOf(&c).Elem().Field(i)
			switch v.Kind() {
			case reflect.String:
				v.SetString("x\xff/ü" + f.Name)
			case reflect.Int, reflect.Int64:
				v.SetInt(-1 << 40)
			case reflect.Pointer:
				if v.Type().Elem().Kind() == reflect.Int {
					for _, n := range []int{0, -1 << 40} {
						v.Set(reflect.ValueOf(&n))
						roundTrip(t, c)
					}
					return
				}
				if v.Type().Elem().Kind() != reflect.Bool {
					t.Fatalf("field %s: a pointer to %s, which the test cannot set", f.Name, v.Type().Elem())
				}
				for _, b := range []bool{false, true} {
					v.Set(reflect.ValueOf(&b))
					roundTrip(t, c)
				}
				return
			default:
				t.Fatalf("field %s is a %s: teach appendChange/decodeChange and this test", f.Name, v.Kind())
			}
			roundTrip(t, c)
		})
	}
}

func roundTrip(t *testing.T, c dryexec.FileChange) {
	t.Helper()
	var got dryexec.FileChange
	if err := decodeChange(appendChange(nil, &c), &got); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: got %+v, want %+v", got, c)
	}
}

// TestSpoolCodecRefusesGarbage: a truncated or extended encoding is an error,
// never a change with fields shifted.
func TestSpoolCodecRefusesGarbage(t *testing.T) {
	kept := false
	c := dryexec.FileChange{Path: "/a/b", Op: dryexec.OpCreate, Kind: dryexec.KindFile, Size: 3, Mode: "0644",
		SHA256: "ab", Diff: "+x\n", ContentKept: &kept, ContentReason: "cap"}
	b := appendChange(nil, &c)
	for n := range len(b) {
		var got dryexec.FileChange
		if err := decodeChange(b[:n], &got); err == nil {
			t.Fatalf("%d of %d bytes decoded without an error: %+v", n, len(b), got)
		}
	}
	var got dryexec.FileChange
	if err := decodeChange(append(b, 0), &got); err == nil {
		t.Fatal("an extra byte decoded without an error")
	}
}
