package netsim

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestLogBounds: the log keeps MaxEvents events and counts the rest; all
// kept bodies together stay under maxBodyTotal; secrets are scrubbed from
// every logged text.
func TestLogBounds(t *testing.T) {
	s, err := New(context.Background(), Config{CADir: t.TempDir(), MaxEvents: 3, MaxBodyBytes: maxBodyTotal})
	if err != nil {
		t.Fatal(err)
	}
	s.secrets = []string{"hunter2"}
	big := []byte(strings.Repeat("x", maxBodyTotal/2+1))
	for i := 0; i < 5; i++ {
		s.record(Record{NetworkEvent: eventOf("http", "GET", "http://a/?k=hunter2", "a", 80, 200, ActionMocked, "echo hunter2"),
			RequestHeader: http.Header{"X-Echo": {"hunter2"}}, ResponseBody: big})
	}
	recs := s.Records()
	if len(recs) != 3 || s.Dropped() != 2 || len(s.Log()) != 3 {
		t.Fatalf("%d records, %d dropped", len(recs), s.Dropped())
	}
	if len(recs[0].ResponseBody) == 0 || len(recs[1].ResponseBody) != 0 || !recs[1].ResponseTruncated {
		t.Fatalf("body budget: %d, %d bytes (truncated %v)", len(recs[0].ResponseBody), len(recs[1].ResponseBody), recs[1].ResponseTruncated)
	}
	for _, r := range recs {
		if strings.Contains(r.URL+r.Reason+http.Header(r.RequestHeader).Get("X-Echo"), "hunter2") {
			t.Fatalf("secret in %+v", r.NetworkEvent)
		}
	}
}
