package server

import (
	"net/http"
	"strings"

	"github.com/dryexec/dryexec/session"
	"github.com/dryexec/dryexec/wire"
)

// cacheKindHeader carries a cache value's kind on GET and PUT
// /v1/sessions/{id}/cache/{key}: absent for raw bytes, "pickle" for a pickle
// (made in the sandbox, or by the caller for the sandbox to unpickle). The
// daemon never unpickles; neither does the SDK unless asked.
const cacheKindHeader = "X-Dryexec-Cache-Kind"

// checkCacheInit bounds a session's initial cache (SessionRequest.Cache).
func checkCacheInit(items map[string]CacheItem) error {
	var size int64
	for k, it := range items {
		if k == "" || len(k) > wire.MaxCacheKey || strings.ContainsRune(k, 0) {
			return badRequest("cache: key %q: want 1 to %d bytes without NUL", k, wire.MaxCacheKey)
		}
		if it.Kind != "" && it.Kind != session.CachePickle {
			return badRequest("cache.%s: kind %q: want \"\" (bytes) or \"pickle\"", k, it.Kind)
		}
		if len(it.Bytes) > wire.MaxCacheValue {
			return badRequest("cache.%s: %d bytes (max %d)", k, len(it.Bytes), wire.MaxCacheValue)
		}
		size += int64(len(it.Bytes))
	}
	if size > session.MaxCacheBytes || len(items) > session.MaxCacheEntries {
		return badRequest("cache: %d bytes in %d keys (max %d bytes, %d keys)", size, len(items), session.MaxCacheBytes, session.MaxCacheEntries)
	}
	return nil
}

func cacheItems(items map[string]CacheItem) map[string]session.CacheItem {
	if len(items) == 0 {
		return nil
	}
	out := make(map[string]session.CacheItem, len(items))
	for k, it := range items {
		out[k] = session.CacheItem{Value: it.Bytes, Kind: it.Kind}
	}
	return out
}

// cacheKindOf reads a PUT's kind header.
func cacheKindOf(r *http.Request) (string, error) {
	k := r.Header.Get(cacheKindHeader)
	if k != "" && k != session.CachePickle {
		return "", badRequest("%s: %q: want absent (bytes) or \"pickle\"", cacheKindHeader, k)
	}
	return k, nil
}

// checkCaps refuses negative caps (the session lowers large ones to its
// ceilings).
func checkCaps(c *wire.Caps) error {
	if c != nil && (c.Entry < 0 || c.Total < 0) {
		return badRequest("caps: entry and total are 0 (the default) or positive")
	}
	return nil
}
