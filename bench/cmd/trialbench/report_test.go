//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"image/png"
	"strings"
	"testing"
)

// TestMeasureAndReport: rounds are interleaved and prepared, values sorted,
// ratios taken to each baseline in the row's unit, a skipped group said so,
// and the chart is a PNG tall enough for every row.
func TestMeasureAndReport(t *testing.T) {
	var order []string
	val := func(name string, v float64) candidate {
		return candidate{name: name,
			prep: func() error { order = append(order, "prep "+name); return nil },
			run:  func() (float64, error) { order = append(order, name); return v, nil }}
	}
	g := group{key: "x", title: "X", unit: rate("files/s"), bases: []int{1}, cands: []candidate{val("fast one", 30), val("base line", 10)}}
	res, err := measure(g, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := "prep fast one,fast one,prep base line,base line," + // warm-up
		"prep fast one,fast one,prep base line,base line,prep fast one,fast one,prep base line,base line"
	if got := strings.Join(order, ","); got != want {
		t.Errorf("order:\n%s\nwant\n%s", got, want)
	}
	if len(res[0].vals) != 2 || res[0].median() != 30 {
		t.Errorf("values %v", res[0].vals)
	}
	skipped := group{key: "net", title: "Net", note: "skipped: no root"}
	report := formatReport(describeMachine(), config{rounds: 2, note: "NOISY"}, []group{g, skipped}, [][]result{res, nil}, nil)
	for _, s := range []string{"**NOISY**", "| candidate | median | min | max | × base |", "| fast one | 30 files/s | 30 files/s | 30 files/s | 3.00 |", "Not measured: skipped: no root"} {
		if !strings.Contains(report, s) {
			t.Errorf("report lacks %q:\n%s", s, report)
		}
	}
	b, err := chart(describeMachine(), config{}, []group{g, skipped}, [][]result{res, nil})
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if h := img.Bounds().Dy(); h < 8*rowHeight {
		t.Errorf("chart %d px tall for 2 groups", h)
	}
}

// TestMeasureFails: a failing candidate fails the run, naming itself.
func TestMeasureFails(t *testing.T) {
	boom := errors.New("boom")
	_, err := measure(group{cands: []candidate{{name: "bad", run: func() (float64, error) { return 0, boom }}}}, 3)
	if !errors.Is(err, boom) || !strings.Contains(fmt.Sprint(err), "bad") {
		t.Errorf("err %v", err)
	}
}
