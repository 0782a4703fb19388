package openapi

import (
	"encoding/base64"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
)

// maxDepth stops recursive schemas (a tree node holding nodes): below it only
// required properties are generated, and arrays are empty unless minItems
// says otherwise.
const maxDepth = 4

// genEpoch anchors generated dates, so that a seed gives the same bytes on any
// day.
var genEpoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

var words = []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"}

// generator builds a value valid for a schema from a seeded source, so the
// same seed and request give the same bytes.
type generator struct {
	rng *rand.Rand
}

func (g *generator) value(s *openapi3.Schema, depth int) any {
	if s == nil {
		return nil
	}
	if s.Example != nil {
		return s.Example
	}
	if len(s.Enum) > 0 {
		return s.Enum[g.rng.IntN(len(s.Enum))]
	}
	if len(s.AllOf) > 0 {
		out := map[string]any{}
		for _, r := range s.AllOf {
			if m, ok := g.value(r.Value, depth).(map[string]any); ok {
				for k, v := range m {
					out[k] = v
				}
			}
		}
		if len(s.Properties) > 0 {
			for k, v := range g.object(s, depth) {
				out[k] = v
			}
		}
		return out
	}
	if len(s.OneOf) > 0 {
		return g.value(s.OneOf[0].Value, depth)
	}
	if len(s.AnyOf) > 0 {
		return g.value(s.AnyOf[0].Value, depth)
	}
	switch {
	case s.Type.Is("object"), s.Type.IsEmpty() && len(s.Properties) > 0:
		return g.object(s, depth)
	case s.Type.Is("array"):
		return g.array(s, depth)
	case s.Type.Is("string"):
		return g.str(s)
	case s.Type.Is("integer"):
		return g.integer(s)
	case s.Type.Is("number"):
		return g.number(s)
	case s.Type.Is("boolean"):
		return g.rng.IntN(2) == 1
	case s.Type.Is("null"):
		return nil
	}
	if ts := s.Type.Slice(); len(ts) > 0 {
		c := *s
		c.Type = &openapi3.Types{ts[0]}
		for _, t := range ts {
			if t != "null" {
				c.Type = &openapi3.Types{t}
				break
			}
		}
		return g.value(&c, depth)
	}
	return g.str(s)
}

func (g *generator) object(s *openapi3.Schema, depth int) map[string]any {
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make(map[string]any, len(names))
	for _, n := range names {
		ref := s.Properties[n]
		if ref == nil || ref.Value == nil || ref.Value.WriteOnly {
			continue
		}
		if depth >= maxDepth && !contains(s.Required, n) {
			continue
		}
		out[n] = g.value(ref.Value, depth+1)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (g *generator) array(s *openapi3.Schema, depth int) []any {
	n := uint64(2)
	if depth >= maxDepth {
		n = 0
	}
	if n < s.MinItems {
		n = s.MinItems
	}
	if s.MaxItems != nil && n > *s.MaxItems {
		n = *s.MaxItems
	}
	out := make([]any, 0, n)
	var item *openapi3.Schema
	if s.Items != nil {
		item = s.Items.Value
	}
	for i := uint64(0); i < n; i++ {
		v := g.value(item, depth+1)
		if s.UniqueItems {
			// Enums and booleans can repeat; a duplicate is dropped rather
			// than answered invalid.
			dup := false
			for _, o := range out {
				if fmt.Sprint(o) == fmt.Sprint(v) {
					dup = true
				}
			}
			if dup {
				continue
			}
		}
		out = append(out, v)
	}
	return out
}

func (g *generator) str(s *openapi3.Schema) string {
	r := g.rng
	var v string
	switch s.Format {
	case "date-time":
		v = genEpoch.Add(time.Duration(r.IntN(365*24*3600)) * time.Second).Format(time.RFC3339)
	case "date":
		v = genEpoch.AddDate(0, 0, r.IntN(365)).Format("2006-01-02")
	case "time":
		v = fmt.Sprintf("%02d:%02d:%02dZ", r.IntN(24), r.IntN(60), r.IntN(60))
	case "uuid":
		b := make([]byte, 16)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		b[6] = b[6]&0x0f | 0x40
		b[8] = b[8]&0x3f | 0x80
		v = fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
	case "email":
		v = fmt.Sprintf("%s%d@example.com", words[r.IntN(len(words))], r.IntN(1000))
	case "uri", "url":
		v = fmt.Sprintf("https://example.com/%s/%d", words[r.IntN(len(words))], r.IntN(1000))
	case "hostname":
		v = fmt.Sprintf("%s.example.com", words[r.IntN(len(words))])
	case "ipv4":
		v = fmt.Sprintf("192.0.2.%d", 1+r.IntN(254))
	case "ipv6":
		v = fmt.Sprintf("2001:db8::%x", 1+r.IntN(0xfffe))
	case "byte":
		v = base64.StdEncoding.EncodeToString([]byte(words[r.IntN(len(words))]))
	case "password":
		v = "********"
	default:
		v = fmt.Sprintf("%s-%d", words[r.IntN(len(words))], r.IntN(1000))
	}
	if uint64(len(v)) < s.MinLength {
		v += strings.Repeat("x", int(s.MinLength)-len(v))
	}
	if s.MaxLength != nil && uint64(len(v)) > *s.MaxLength {
		v = v[:*s.MaxLength]
	}
	return v
}

func bounds(s *openapi3.Schema, defLo, defHi float64) (lo, hi float64, exLo, exHi bool) {
	lo, hi = defLo, defHi
	if s.Min != nil {
		lo = *s.Min
		exLo = s.ExclusiveMin.IsTrue()
	}
	if s.ExclusiveMin.Value != nil {
		lo, exLo = *s.ExclusiveMin.Value, true
	}
	if s.Max != nil {
		hi = *s.Max
		exHi = s.ExclusiveMax.IsTrue()
	}
	if s.ExclusiveMax.Value != nil {
		hi, exHi = *s.ExclusiveMax.Value, true
	}
	if s.Min != nil && s.Max == nil {
		hi = lo + 1000
	}
	if s.Max != nil && s.Min == nil {
		lo = math.Min(0, hi-1000)
	}
	return lo, hi, exLo, exHi
}

func (g *generator) integer(s *openapi3.Schema) int64 {
	flo, fhi, exLo, exHi := bounds(s, 1, 1000)
	lo, hi := int64(math.Ceil(flo)), int64(math.Floor(fhi))
	if exLo && float64(lo) == flo {
		lo++
	}
	if exHi && float64(hi) == fhi {
		hi--
	}
	if hi < lo {
		return lo
	}
	v := lo + g.rng.Int64N(hi-lo+1)
	if s.MultipleOf != nil && *s.MultipleOf >= 1 {
		m := int64(*s.MultipleOf)
		v = (v / m) * m
		if v < lo {
			v += m
		}
	}
	return v
}

func (g *generator) number(s *openapi3.Schema) float64 {
	lo, hi, exLo, exHi := bounds(s, 0, 1000)
	if exLo {
		lo += 0.01
	}
	if exHi {
		hi -= 0.01
	}
	if hi < lo {
		return lo
	}
	v := math.Round((lo+g.rng.Float64()*(hi-lo))*100) / 100
	return math.Min(math.Max(v, lo), hi)
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }
