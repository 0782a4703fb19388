package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/dryexec/dryexec/wire"
)

// CachePickle is the kind of a cache value that is a pickle: the sandbox's
// Python pickled it (cache[k] = 41) and unpickles it when it reads it back.
// Outside the sandbox it is opaque bytes: the host stores and returns them and
// never unpickles them, which is why the sandbox may write any pickle it
// likes; unpickling runs code, and only the sandbox, which runs any code
// anyway, does it.
const CachePickle = "pickle"

// CacheItem is a value with its kind ("" raw bytes, or CachePickle).
type CacheItem struct {
	Value []byte
	Kind  string
}

// ErrCacheKind: a value's kind is neither "" nor CachePickle.
var ErrCacheKind = errors.New("session: a cache value's kind is \"\" (bytes) or \"pickle\"")

func checkCacheKind(kind string) error {
	if kind != "" && kind != CachePickle {
		return fmt.Errorf("%w, not %q", ErrCacheKind, kind)
	}
	return nil
}

// Limits on what the sandbox may put in the cache (Go callers' own Sets are
// not limited): the host keeps every value in memory.
const (
	// MaxCacheBytes bounds the cache's total size after a sandbox write.
	MaxCacheBytes = 256 << 20
	// MaxCacheEntries bounds the number of keys after a sandbox write.
	MaxCacheEntries = 100_000
)

// Cache is a session's key → bytes store, kept on the host. Go callers use it
// directly; the sandbox's Python sees it as the global `cache` and reads it
// lazily (cache.get / cache.keys). What an exec writes or deletes is pending:
// visible to that exec's own reads, applied here only if the exec succeeds
// (PythonResult.OK), dropped otherwise. With Options.CacheReadOnly the sandbox
// cannot write at all. Values are copied in and out; the methods are safe for
// concurrent use, also while an exec runs.
type Cache struct {
	mu       sync.Mutex // guards the fields below
	readOnly bool
	gen      uint64 // last generation handed out; each stored value gets a new one
	m        map[string]cacheEntry
	size     int64      // bytes of values in m
	exec     *cacheExec // the running exec's pending changes; nil between execs
}

type cacheEntry struct {
	v    []byte // never modified once stored: chunks of it are sent as is
	gen  uint64
	kind string // "" or CachePickle
}

// cacheExec is what one exec wrote: a nil entry is a delete.
type cacheExec struct {
	readOnly bool // this exec may not write (PythonOptions.CacheReadOnly)
	writes   map[string]*cacheEntry
	uploads  map[string]*cacheUpload // values arriving in chunks
}

type cacheUpload struct {
	buf  []byte
	size int64
	kind string
}

func newCache(readOnly bool) *Cache {
	return &Cache{readOnly: readOnly, m: map[string]cacheEntry{}}
}

// Get returns a copy of key's value.
func (c *Cache) Get(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		return nil, false
	}
	return slices.Clone(e.v), true
}

// Set stores a copy of value under key.
func (c *Cache) Set(key string, value []byte) {
	_ = c.SetEntry(key, CacheItem{Value: value}) // kind "" is always valid
}

// GetEntry returns a copy of key's value with its kind: "" for raw bytes (a
// str is stored as its UTF-8), CachePickle for a pickle made in the sandbox
// (or by a caller, for the sandbox to unpickle). The host never unpickles.
func (c *Cache) GetEntry(key string) (CacheItem, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		return CacheItem{}, false
	}
	return CacheItem{Value: slices.Clone(e.v), Kind: e.kind}, true
}

// SetEntry stores a copy of item under key; its kind must be "" or
// CachePickle.
func (c *Cache) SetEntry(key string, item CacheItem) error {
	if err := checkCacheKind(item.Kind); err != nil {
		return err
	}
	v := slices.Clone(item.Value)
	if v == nil {
		v = []byte{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.size += int64(len(v)) - int64(len(c.m[key].v))
	c.m[key] = cacheEntry{v: v, gen: c.gen, kind: item.Kind}
	return nil
}

// Delete removes key.
func (c *Cache) Delete(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.size -= int64(len(c.m[key].v))
	delete(c.m, key)
}

// Keys lists the keys, sorted.
func (c *Cache) Keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.m))
}

// begin starts collecting an exec's writes; readOnly refuses them.
func (c *Cache) begin(readOnly bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exec = &cacheExec{readOnly: readOnly, writes: map[string]*cacheEntry{}, uploads: map[string]*cacheUpload{}}
}

// end applies the exec's writes if commit, drops them otherwise.
func (c *Cache) end(commit bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	x := c.exec
	c.exec = nil
	if !commit || x == nil {
		return
	}
	for k, e := range x.writes {
		c.size -= int64(len(c.m[k].v))
		if e == nil {
			delete(c.m, k)
			continue
		}
		c.size += int64(len(e.v))
		c.m[k] = *e
	}
}

// running reports whether an exec is outstanding: guest calls are answered only
// then.
func (c *Cache) running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exec != nil
}

// lookup is key's entry as the running exec sees it. c.mu is held.
func (c *Cache) lookup(key string) *cacheEntry {
	if c.exec != nil {
		if e, ok := c.exec.writes[key]; ok {
			return e
		}
	}
	if e, ok := c.m[key]; ok {
		return &e
	}
	return nil
}

// after is the cache's size and key count if the running exec's writes (and a
// further value of n bytes under key) were applied. c.mu is held.
func (c *Cache) after(key string, n int64) (int64, int) {
	size, count := c.size, len(c.m)
	visit := func(k string, e *cacheEntry) {
		old, had := c.m[k]
		size -= int64(len(old.v))
		if had {
			count--
		}
		if e != nil {
			size += int64(len(e.v))
			count++
		}
	}
	for k, e := range c.exec.writes {
		if k != key {
			visit(k, e)
		}
	}
	for k, u := range c.exec.uploads {
		if k != key {
			size += u.size
		}
	}
	visit(key, &cacheEntry{v: make([]byte, 0)})
	return size + n, count
}

// writable refuses a sandbox write when the session or the exec is read-only.
// c.mu is held.
func (c *Cache) writable() error {
	switch {
	case c.readOnly:
		return cacheRefusal("read_only", "the cache is read-only in this session")
	case c.exec.readOnly:
		return cacheRefusal("read_only", "the cache is read-only in this exec (cache_readonly)")
	}
	return nil
}

func cacheRefusal(code, format string, a ...any) error {
	return remoteErr(code, format, a...)
}

// serve answers the guest's cache.* calls.
func (c *Cache) serve(_ context.Context, f *wire.Frame) (any, [][]byte, error) {
	if f.Verb == wire.VerbCacheKeys {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.exec == nil {
			return nil, nil, cacheRefusal("no_exec", "%s outside an exec", f.Verb)
		}
		keys := map[string]bool{}
		for k := range c.m {
			keys[k] = true
		}
		for k, e := range c.exec.writes {
			keys[k] = e != nil
		}
		out := []string{}
		for k, ok := range keys {
			if ok {
				out = append(out, k)
			}
		}
		slices.Sort(out)
		return &wire.CacheKeys{Keys: out}, nil, nil
	}
	var req wire.CacheRequest
	if err := f.Decode(&req); err != nil {
		return nil, nil, err
	}
	if len(req.Key) > wire.MaxCacheKey {
		return nil, nil, cacheRefusal("value", "cache keys are at most %d bytes", wire.MaxCacheKey)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exec == nil {
		return nil, nil, cacheRefusal("no_exec", "%s outside an exec", f.Verb)
	}
	switch f.Verb {
	case wire.VerbCacheGet:
		e := c.lookup(req.Key)
		if e == nil {
			return &wire.CacheReply{}, nil, nil
		}
		size := int64(len(e.v))
		if req.Offset > 0 && req.Gen != e.gen {
			return nil, nil, cacheRefusal("changed", "%q changed since its first chunk was read", req.Key)
		}
		if req.Head {
			return &wire.CacheReply{Found: true, Size: size, Gen: e.gen, Kind: e.kind}, nil, nil
		}
		if req.Offset < 0 || req.Offset > size {
			return nil, nil, cacheRefusal("value", "offset %d outside a value of %d bytes", req.Offset, size)
		}
		end := min(req.Offset+wire.MaxAttachment, size)
		return &wire.CacheReply{Found: true, Size: size, Gen: e.gen, Kind: e.kind}, [][]byte{e.v[req.Offset:end]}, nil
	case wire.VerbCacheSet:
		if err := c.writable(); err != nil {
			return nil, nil, err
		}
		if err := checkCacheKind(req.Kind); err != nil {
			return nil, nil, cacheRefusal("value", "%v", err)
		}
		if len(f.Bin) != 1 {
			return nil, nil, cacheRefusal("protocol", "cache.set carries one attachment, not %d", len(f.Bin))
		}
		chunk := f.Bin[0]
		if req.Offset == 0 {
			if req.Size < 0 || req.Size > wire.MaxCacheValue {
				return nil, nil, cacheRefusal("limit", "a cache value of %d bytes (max %d)", req.Size, wire.MaxCacheValue)
			}
			size, count := c.after(req.Key, req.Size)
			if size > MaxCacheBytes {
				return nil, nil, cacheRefusal("limit", "the cache would hold %d bytes (max %d)", size, MaxCacheBytes)
			}
			if count > MaxCacheEntries {
				return nil, nil, cacheRefusal("limit", "the cache would hold %d keys (max %d)", count, MaxCacheEntries)
			}
			c.exec.uploads[req.Key] = &cacheUpload{buf: make([]byte, 0, req.Size), size: req.Size, kind: req.Kind}
		}
		u := c.exec.uploads[req.Key]
		if u == nil || req.Size != u.size || req.Kind != u.kind || req.Offset != int64(len(u.buf)) || int64(len(u.buf)+len(chunk)) > u.size {
			delete(c.exec.uploads, req.Key)
			return nil, nil, cacheRefusal("protocol", "cache.set chunk out of order for %q", req.Key)
		}
		u.buf = append(u.buf, chunk...)
		if int64(len(u.buf)) == u.size {
			delete(c.exec.uploads, req.Key)
			c.gen++
			c.exec.writes[req.Key] = &cacheEntry{v: u.buf, gen: c.gen, kind: u.kind}
		}
		return nil, nil, nil
	case wire.VerbCacheDel:
		if err := c.writable(); err != nil {
			return nil, nil, err
		}
		found := c.lookup(req.Key) != nil
		delete(c.exec.uploads, req.Key)
		c.exec.writes[req.Key] = nil
		return &wire.CacheReply{Found: found}, nil, nil
	}
	return nil, nil, cacheRefusal("unsupported", "unknown verb %q", f.Verb)
}
