package compare

import (
	"strings"
	"testing"
)

func TestCompare(t *testing.T) {
	w := func(sha string) Change { return Change{Op: "write", SHA256: sha, Size: 1, Mode: "0644"} }
	cases := []struct {
		name  string
		sides []map[string]Change
		want  map[string]string // path → agreement
		count [3]int            // alike, differ, partial
	}{
		{"alike", []map[string]Change{{"a": w("1")}, {"a": w("1")}}, map[string]string{"a": Alike}, [3]int{1, 0, 0}},
		{"differ by content", []map[string]Change{{"a": w("1")}, {"a": w("2")}}, map[string]string{"a": Differ}, [3]int{0, 1, 0}},
		{"differ by op", []map[string]Change{{"a": w("1")}, {"a": {Op: "delete"}}}, map[string]string{"a": Differ}, [3]int{0, 1, 0}},
		{"partial", []map[string]Change{{"a": w("1")}, {}, {"a": w("1")}}, map[string]string{"a": Partial}, [3]int{0, 0, 1}},
		{"mixed", []map[string]Change{{"a": w("1"), "b": {Op: "chmod", Mode: "0755"}}, {"a": w("1"), "c": {Op: "symlink", Link: "a"}}},
			map[string]string{"a": Alike, "b": Partial, "c": Partial}, [3]int{1, 0, 2}},
		{"nothing", []map[string]Change{{}, {}}, map[string]string{}, [3]int{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sides []Side
			for i, ch := range c.sides {
				sides = append(sides, Side{Name: string(rune('A' + i)), Decision: "open", Changes: ch})
			}
			r := Compare(sides...)
			got := map[string]string{}
			for _, p := range r.Paths {
				got[p.Path] = p.Agreement
				if len(p.Changes) != len(sides) {
					t.Errorf("%s: %d changes for %d sides", p.Path, len(p.Changes), len(sides))
				}
			}
			if len(got) != len(c.want) {
				t.Errorf("paths %v, want %v", got, c.want)
			}
			for p, a := range c.want {
				if got[p] != a {
					t.Errorf("%s: %q, want %q", p, got[p], a)
				}
			}
			if [3]int{r.Alike, r.Differ, r.Partial} != c.count {
				t.Errorf("counts %d %d %d, want %v", r.Alike, r.Differ, r.Partial, c.count)
			}
			for i, s := range r.Sides {
				if s.Changed != len(c.sides[i]) || s.Reasons == nil {
					t.Errorf("side %d: changed %d, reasons %v", i, s.Changed, s.Reasons)
				}
			}
			var b strings.Builder
			if err := Render(&b, r); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), "A (open)") {
				t.Errorf("render has no heading:\n%s", b.String())
			}
		})
	}
}
