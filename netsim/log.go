package netsim

import (
	"bytes"
	"net/http"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
)

// Actions of a NetworkEvent.
const (
	ActionMocked  = "mocked"
	ActionAllowed = "allowed"
	ActionBlocked = "blocked"
)

// maxBodyTotal bounds the bodies all Records of a Sim keep together.
const maxBodyTotal = 64 << 20

// redacted replaces the value of every credential header in the log.
const redacted = "[redacted]"

// alwaysRedacted are headers whose values never enter the log.
var alwaysRedacted = []string{"Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie"}

// Record is one network exchange as netsim keeps it: the root package's
// type, so that what reads a stored log (render, the store, a client)
// need not link netsim and the network stack it carries.
type Record = dryexec.Exchange

func (s *Sim) record(r Record) {
	r.Time = time.Now()
	r.RequestHeader = s.redactHeader(r.RequestHeader)
	r.ResponseHeader = s.redactHeader(r.ResponseHeader)
	r.RequestBody, r.RequestTruncated = s.bound(r.RequestBody, r.RequestTruncated)
	r.ResponseBody, r.ResponseTruncated = s.bound(r.ResponseBody, r.ResponseTruncated)
	r.URL = s.scrub(r.URL)
	r.Reason = s.scrub(r.Reason)
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if len(s.records) >= s.maxEvents {
		s.dropped++
		if s.cfg.OnRecord != nil {
			s.cfg.OnRecord(r, false)
		}
		return
	}
	// All kept bodies together are bounded too: past the budget, events
	// keep their counts and lose their bodies.
	if n := len(r.RequestBody) + len(r.ResponseBody); s.bodyBytes+n > maxBodyTotal {
		r.RequestTruncated = r.RequestTruncated || len(r.RequestBody) > 0
		r.ResponseTruncated = r.ResponseTruncated || len(r.ResponseBody) > 0
		r.RequestBody, r.ResponseBody = nil, nil
	} else {
		s.bodyBytes += n
	}
	s.records = append(s.records, r)
	if s.cfg.OnRecord != nil {
		s.cfg.OnRecord(r, true)
	}
}

func (s *Sim) bound(b []byte, truncated bool) ([]byte, bool) {
	if len(b) > s.maxBody {
		b, truncated = b[:s.maxBody], true
	}
	if len(b) == 0 {
		return nil, truncated
	}
	for _, v := range s.secrets {
		if v != "" && bytes.Contains(b, []byte(v)) {
			return []byte(s.scrub(string(b))), truncated
		}
	}
	// Kept as is: the slices handed to record are never written again.
	return b, truncated
}

// scrub removes injected secret values from text that goes into the log
// (an upstream that echoes a header would otherwise put it there).
func (s *Sim) scrub(t string) string {
	for _, v := range s.secrets {
		if v != "" && strings.Contains(t, v) {
			t = strings.ReplaceAll(t, v, redacted)
		}
	}
	return t
}

func (s *Sim) redactHeader(h http.Header) http.Header {
	if len(h) == 0 {
		return nil
	}
	out := h.Clone()
	for k, vs := range out {
		secret := false
		for _, r := range alwaysRedacted {
			if strings.EqualFold(k, r) {
				secret = true
			}
		}
		if _, ok := s.injected[http.CanonicalHeaderKey(k)]; ok {
			secret = true
		}
		for i := range vs {
			if secret {
				vs[i] = redacted
			} else {
				vs[i] = s.scrub(vs[i])
			}
		}
	}
	return out
}

// Log returns the network events so far, in the order they completed.
func (s *Sim) Log() []dryexec.NetworkEvent {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	out := make([]dryexec.NetworkEvent, len(s.records))
	for i, r := range s.records {
		out[i] = r.NetworkEvent
	}
	return out
}

// Records returns the events with their bounded, redacted bodies.
func (s *Sim) Records() []Record {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	out := make([]Record, len(s.records))
	copy(out, s.records)
	return out
}

// Dropped counts events beyond Config.MaxEvents, which the log does not hold.
func (s *Sim) Dropped() int {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.dropped
}

// capBuffer keeps the first max bytes written to it and counts them all.
type capBuffer struct {
	buf bytes.Buffer
	max int
	n   int64
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	if room := c.max - c.buf.Len(); room > 0 {
		if len(p) > room {
			c.buf.Write(p[:room])
		} else {
			c.buf.Write(p)
		}
	}
	return len(p), nil
}

func (c *capBuffer) truncated() bool { return c.n > int64(c.buf.Len()) }
