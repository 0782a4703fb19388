package conformance

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/dryexec/dryexec/session"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dryexec/dryexec/wire"
)

func cacheGet(t *testing.T, s *session.Session, key string) (string, bool) {
	t.Helper()
	v, ok := s.Cache().Get(key)
	return string(v), ok
}

var cacheCases = []conformanceCase{
	{"reads", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		s.Cache().Set("seed", []byte("v1"))
		r := pyOK(t, s, `r = [cache['seed'].decode(), cache.get('nope'), cache.get('nope', 'dflt'), 'seed' in cache, 'nope' in cache, cache.keys(), len(cache)]
try:
    cache['nope']
except KeyError:
    r.append('KeyError')
`, nil)
		if got, want := output(t, r, "r"), `["v1",null,"dflt",true,false,["seed"],1,"KeyError"]`; got != want {
			t.Errorf("r = %s, want %s", got, want)
		}
	}},
	{"writes_visible_in_exec_applied_on_success", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		s.Cache().Set("seed", []byte("v1"))
		r := pyOK(t, s, `cache['new'] = 'n1'
cache['b'] = b'\x00'
cache['new'] = cache['new'] + b'+'
del cache['seed']
r = [cache['new'].decode(), 'seed' in cache, cache.get('seed'), sorted(cache.keys())]
try:
    del cache['seed']
except KeyError:
    r.append('KeyError')
for bad in ((1, b''), ('k', lambda: 5)):  # 5 would pickle
    try:
        cache[bad[0]] = bad[1]
    except TypeError:
        r.append('TypeError')
`, nil)
		if got, want := output(t, r, "r"), `["n1+",false,null,["b","new"],"KeyError","TypeError","TypeError"]`; got != want {
			t.Errorf("r = %s, want %s", got, want)
		}
		if v, ok := cacheGet(t, s, "new"); v != "n1+" || !ok {
			t.Errorf("new = %q %v", v, ok)
		}
		if _, ok := cacheGet(t, s, "seed"); ok {
			t.Errorf("seed was not deleted")
		}
		if got := s.Cache().Keys(); !slices.Equal(got, []string{"b", "new"}) {
			t.Errorf("keys %q", got)
		}
		// The next exec sees what the last one wrote.
		if r := pyOK(t, s, "cache['new']", nil); r.Transcript != "b'n1+'\n" {
			t.Errorf("next exec reads %q", r.Transcript)
		}
	}},
	{"writes_discarded_when_the_exec_fails", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		s.Cache().Set("keep", []byte("1"))
		for _, tc := range []struct {
			name, code string
			timeout    time.Duration
		}{
			{"exception", "cache['x'] = 'new'\ndel cache['keep']\nraise ValueError('fail')", pyTimeout},
			{"timeout", "cache['x'] = 'new'\ndel cache['keep']\nimport time\ntime.sleep(60)", time.Second},
			{"crash", "cache['x'] = 'new'\ndel cache['keep']\nimport os\nos._exit(1)", pyTimeout},
		} {
			r, err := s.Python(ctx(t), tc.code, nil, tc.timeout)
			if err != nil || r.OK {
				t.Fatalf("%s: err %v, ok %v", tc.name, err, r.OK)
			}
			if _, ok := cacheGet(t, s, "x"); ok {
				t.Errorf("%s: a failed exec's write was applied", tc.name)
			}
			if v, ok := cacheGet(t, s, "keep"); v != "1" || !ok {
				t.Errorf("%s: a failed exec's delete was applied", tc.name)
			}
		}
	}},
	{"a_read_is_not_a_write", func(t *testing.T, open opener) {
		// The host changes a key while an exec that read it runs: the exec
		// succeeding does not put back what it read.
		var s *session.Session
		obj := &cacheToucher{session: &s}
		s = open(t, session.Options{HostObjects: map[string]any{"h": obj}, Allow: map[string][]string{"h": {"touch"}}})
		s.Cache().Set("r", []byte("before"))
		r := pyOK(t, s, "v = cache['r'].decode()\nhost.h.touch('r', 'host')\nafter = cache['r'].decode()", nil)
		if output(t, r, "v") != `"before"` || output(t, r, "after") != `"host"` {
			t.Errorf("v %s after %s", output(t, r, "v"), output(t, r, "after"))
		}
		if v, _ := cacheGet(t, s, "r"); v != "host" {
			t.Errorf("r = %q after a read-only exec, want the host's write", v)
		}
	}},
	{"read_only", func(t *testing.T, open opener) {
		s := open(t, session.Options{CacheReadOnly: true})
		s.Cache().Set("k", []byte("v"))
		r := pyOK(t, s, `r = [cache['k'].decode()]
try:
    cache['k'] = 'w'
except PermissionError as e:
    r.append('set: ' + str(e))
try:
    del cache['k']
except PermissionError as e:
    r.append('del: ' + str(e))
`, nil)
		got := output(t, r, "r")
		if !strings.HasPrefix(got, `["v","set: `) || !strings.Contains(got, "read-only") || !strings.Contains(got, `"del: `) {
			t.Errorf("r = %s", got)
		}
		r = py(t, s, "cache['k'] = 'w'", nil)
		if r.OK || r.Error == nil || r.Error.Type != "PermissionError" {
			t.Errorf("an unhandled write: ok %v error %+v", r.OK, r.Error)
		}
		if v, _ := cacheGet(t, s, "k"); v != "v" {
			t.Errorf("k = %q", v)
		}
		// Go callers still own the cache.
		s.Cache().Set("k", []byte("go"))
		if v, _ := cacheGet(t, s, "k"); v != "go" {
			t.Errorf("k = %q after a Go Set", v)
		}
	}},
	{"multi_megabyte_values_both_ways", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		for _, size := range []int{5 << 20, 5<<20 + 12345, 0} {
			big := make([]byte, size)
			rng := rand.New(rand.NewPCG(uint64(size), 1))
			for i := range big {
				big[i] = byte(rng.Uint32())
			}
			s.Cache().Set("big", big)
			sum := sha256.Sum256(big)
			r := pyOK(t, s, "import hashlib\n_v = cache['big']\nh = hashlib.sha256(_v).hexdigest()\nn = len(_v)\ncache['back'] = _v[::-1]", nil)
			if got := output(t, r, "h"); got != `"`+hex.EncodeToString(sum[:])+`"` {
				t.Errorf("%d bytes: python read a different value (sha %s)", size, got)
			}
			if got := output(t, r, "n"); got != fmt.Sprint(size) {
				t.Errorf("%d bytes: python read %s", size, got)
			}
			back, ok := s.Cache().Get("back")
			slices.Reverse(back)
			if !ok || !bytes.Equal(back, big) {
				t.Errorf("%d bytes: the value python wrote differs (%d bytes)", size, len(back))
			}
		}
	}},
	{"emit_in_order_kept_on_failure", func(t *testing.T, open opener) {
		var mu sync.Mutex
		var seen []wire.Emit
		s := open(t, session.Options{OnEmit: func(e wire.Emit) {
			mu.Lock()
			seen = append(seen, e)
			mu.Unlock()
		}})
		r := py(t, s, `import pathlib
emit('a', 1)
emit('b', {'x': [1, 2]})
emit('c', b'\x00\x01')
emit('d', pathlib.Path('f.txt'))
for i in range(200):
    emit('n', i)
raise RuntimeError('after the emits')`, nil)
		if r.OK {
			t.Fatal("the exec succeeded")
		}
		got := s.Emits()
		if len(got) != 204 {
			t.Fatalf("%d events, want 204", len(got))
		}
		want := []wire.Emit{{Name: "a", Value: session.JSON(1.0)}, {Name: "b", Value: session.JSON(map[string]any{"x": []any{1.0, 2.0}})},
			{Name: "c", Value: session.Bytes([]byte{0, 1})}, {Name: "d", Value: session.File("f.txt")}}
		if jsonOf(t, got[:4]) != jsonOf(t, want) {
			t.Errorf("events %s, want %s", jsonOf(t, got[:4]), jsonOf(t, want))
		}
		for i, e := range got[4:] {
			if e.Name != "n" || e.Value.JSON != float64(i) {
				t.Fatalf("event %d is %+v, want n %d", i+4, e, i)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if jsonOf(t, seen) != jsonOf(t, got) {
			t.Errorf("OnEmit saw other events than Emits returns")
		}
	}},
	{"emit_unrepresentable_rejected_in_guest", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		r := pyOK(t, s, `r = []
for v in (object(), {1: 2}, float('nan'), {1, 2}, [print]):
    try:
        emit('bad', v)
    except TypeError:
        r.append('TypeError')
try:
    emit(5, 1)
except TypeError:
    r.append('name')
try:
    emit('huge', bytes(30 << 20))  # 40 MiB of base64: more than a message may be
except ValueError:
    r.append('ValueError')
try:
    cache['huge'] = bytes((64 << 20) + 1)
except ValueError:
    r.append('ValueError')
emit('good', None)`, nil)
		if got := output(t, r, "r"); got != `["TypeError","TypeError","TypeError","TypeError","TypeError","name","ValueError","ValueError"]` {
			t.Errorf("r = %s", got)
		}
		if got := s.Emits(); len(got) != 1 || got[0].Name != "good" || got[0].Value.Type != "json" || got[0].Value.JSON != nil {
			t.Errorf("events %+v: only 'good' should have been sent", got)
		}
	}},
}

// cacheToucher changes the host's cache from inside a host call.
type cacheToucher struct{ session **session.Session }

func (c *cacheToucher) Touch(key, value string) { (*c.session).Cache().Set(key, []byte(value)) }
