package render

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/dryexec/dryexec"
)

// maxBodyLines bounds how much of one body Exchanges prints.
const maxBodyLines = 40

// Exchanges writes a trial's kept network exchanges (dryexec.Exchange records as JSON,
// what store.Exchanges returns) for a person: each event's line as in the
// summary, then its request and response headers and bodies. Bodies that
// are not text are summarised by size; everything is escaped like the rest
// of the sandbox's output.
func Exchanges(w io.Writer, records []byte, opt Options) error {
	var recs []dryexec.Exchange
	if len(records) > 0 {
		if err := json.Unmarshal(records, &recs); err != nil {
			return fmt.Errorf("render: the stored network exchanges are damaged: %w", err)
		}
	}
	p := &printer{w: w}
	c := newPalette(opt.Color)
	if len(recs) == 0 {
		p.line("no network exchanges were kept for this trial")
		return p.err
	}
	for i, r := range recs {
		if i > 0 {
			p.line("")
		}
		p.line("%s", networkText(r.NetworkEvent, c))
		writeExchangePart(p, "request", r.RequestHeader, r.RequestBody, r.RequestTruncated)
		writeExchangePart(p, "response", r.ResponseHeader, r.ResponseBody, r.ResponseTruncated)
	}
	return p.err
}

func writeExchangePart(p *printer, name string, h map[string][]string, body []byte, truncated bool) {
	if len(h) == 0 && len(body) == 0 {
		return
	}
	p.line("  %s:", name)
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range h[k] {
			p.line("    %s: %s", cleanField(k), cleanField(v))
		}
	}
	if len(body) == 0 {
		return
	}
	note := ""
	if truncated {
		note = ", truncated: the start kept"
	}
	if !utf8.Valid(body) {
		p.line("    [%d bytes of binary body%s]", len(body), note)
		return
	}
	p.line("    [body, %d bytes%s]", len(body), note)
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	for i, l := range lines {
		if i == maxBodyLines {
			p.line("    … %d more lines", len(lines)-maxBodyLines)
			break
		}
		p.line("    %s", cleanLine(l))
	}
}
