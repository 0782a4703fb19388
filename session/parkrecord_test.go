package session

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/wire"
)

type recordDispatcher struct{}

func (recordDispatcher) CallMethod(context.Context, string, []wire.Value) (wire.Value, error) {
	return wire.Value{}, nil
}

// A parked session's record, through JSON (as a later daemon reads it),
// gives back the same options, cache, host objects' allowlists, violations
// and network log; the resuming process's paths are hidden too.
func TestParkRecordRoundTrip(t *testing.T) {
	allow := map[string][]string{"db": {"query", "close"}}
	objs := map[string]any{"db": recordDispatcher{}}
	hos, err := newHostObjects(objs, allow)
	if err != nil {
		t.Fatal(err)
	}
	c := newCache(false)
	c.SetEntry("a", CacheItem{Value: []byte("1")})
	c.SetEntry("p", CacheItem{Value: []byte{0x80, 4}, Kind: CachePickle})
	opt := Options{Rung: "vm", Workspace: "/w", Env: map[string]string{"X": "1"}, OutputCap: 7, Shell: "sh", PythonWarm: true,
		Limits: dryexec.Limits{MemoryBytes: 1 << 30, CPUs: 1.5}, Masks: []string{"/m"}, OwnPaths: []string{"/old"}, Net: []string{"none"},
		NetCADir: "/ca", HostObjects: objs, Allow: allow}
	p := &Parked{Dir: "/d", At: time.Now(), opt: opt, cache: c, hostObjects: hos, hostGlobals: true,
		violations: []dryexec.Violation{{Kind: "syscall", Detail: "ptrace"}}, network: []dryexec.NetworkEvent{{Host: "example.com", Port: 443}}}
	b, err := json.Marshal(p.Record())
	if err != nil {
		t.Fatal(err)
	}
	var rec ParkRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	q, err := LoadParked("/e", p.At, rec, ResumeBinding{GuestExe: "/g", HostObjects: map[string]any{"db": recordDispatcher{}}, OwnPaths: []string{"/new"}})
	if err != nil {
		t.Fatal(err)
	}
	got := q.Options()
	if got.Rung != "vm" || got.Workspace != "/w" || got.Env["X"] != "1" || got.OutputCap != 7 || got.Shell != "sh" || !got.PythonWarm ||
		got.Limits != opt.Limits || !reflect.DeepEqual(got.Masks, opt.Masks) || !reflect.DeepEqual(got.Net, opt.Net) || got.NetCADir != "/ca" ||
		got.GuestExe != "/g" || got.NoHostGlobals || !reflect.DeepEqual(got.Allow, allow) {
		t.Errorf("options: %+v", got)
	}
	if !reflect.DeepEqual(got.OwnPaths, []string{"/new", "/old"}) {
		t.Errorf("own paths: %v", got.OwnPaths)
	}
	if v, ok := q.cache.GetEntry("p"); !ok || v.Kind != CachePickle || string(v.Value) != "\x80\x04" {
		t.Errorf("cache p: %+v %v", v, ok)
	}
	if !reflect.DeepEqual(q.cache.Keys(), []string{"a", "p"}) || !q.hostGlobals || q.Dir != "/e" {
		t.Errorf("cache %v, globals %v, dir %s", q.cache.Keys(), q.hostGlobals, q.Dir)
	}
	if !reflect.DeepEqual(q.violations, p.violations) || !reflect.DeepEqual(q.network, p.network) {
		t.Errorf("violations %v, network %v", q.violations, q.network)
	}
	if q.hostObjects["db"] == nil || !q.hostObjects["db"].allowed["query"] {
		t.Errorf("host objects: %+v", q.hostObjects)
	}
}

// A record that cannot be resumed as it is is refused before anything
// starts.
func TestParkRecordRefused(t *testing.T) {
	ok := ParkRecord{Rung: "vm"}
	for name, c := range map[string]struct {
		rec ParkRecord
		b   ResumeBinding
	}{
		"no rung":          {ParkRecord{}, ResumeBinding{}},
		"rung cannot park": {ParkRecord{Rung: "ns"}, ResumeBinding{}},
		"unknown rung":     {ParkRecord{Rung: "vm/../ns"}, ResumeBinding{}},
		"cache kind":       {ParkRecord{Rung: "vm", Cache: []ParkedCacheItem{{Key: "k", Kind: "marshal"}}}, ResumeBinding{}},
		"cache key twice":  {ParkRecord{Rung: "vm", Cache: []ParkedCacheItem{{Key: "k"}, {Key: "k"}}}, ResumeBinding{}},
		"limits":           {ParkRecord{Rung: "vm", Limits: dryexec.Limits{MemoryBytes: -2}}, ResumeBinding{}},
		"shell":            {ParkRecord{Rung: "vm", Shell: "bash -c"}, ResumeBinding{}},
		"object not given": {ParkRecord{Rung: "vm", Allow: map[string][]string{"db": {"q"}}}, ResumeBinding{}},
		"image not given":  {ParkRecord{Rung: "vm", Image: &ParkedImage{Ref: "r", Digest: "sha256:1"}}, ResumeBinding{}},
		"other image":      {ParkRecord{Rung: "vm", Image: &ParkedImage{Ref: "r", Digest: "sha256:1"}}, ResumeBinding{Image: &dryexec.ImageRoot{Ref: "r", Digest: "sha256:2"}}},
	} {
		if _, err := LoadParked("/d", time.Now(), c.rec, c.b); !errors.Is(err, ErrBadParkRecord) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := LoadParked("/d", time.Now(), ok, ResumeBinding{}); err != nil {
		t.Errorf("a plain record: %v", err)
	}
}
