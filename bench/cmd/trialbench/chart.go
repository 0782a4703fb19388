//go:build linux

package main

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"strings"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// The chart's geometry, in pixels. basicfont's face is 7×13.
const (
	chartWidth = 1200
	labelWidth = 460 // candidate names, cut to fit
	barLeft    = labelWidth + 10
	barWidth   = 520
	rowHeight  = 18
	titleRows  = 2 // a group's title and the gap above it
	margin     = 10
)

var (
	colWhite    = color.RGBA{255, 255, 255, 255}
	colText     = color.RGBA{20, 20, 20, 255}
	colBar      = color.RGBA{52, 101, 164, 255}
	colBaseline = color.RGBA{160, 160, 160, 255}
	colWhisker  = color.RGBA{0, 0, 0, 255}
)

// chart draws every group as horizontal bars: the bar is the median, the
// line through it spans min to max, grey bars are the group's baselines.
// Each group has its own scale (1.2 × its largest median), so bars compare
// only within a group, as the ratios do.
func chart(m machine, cfg config, groups []group, sections [][]result) ([]byte, error) {
	rows := 3
	if cfg.note != "" {
		rows++
	}
	for si, res := range sections {
		rows += titleRows + max(len(res), 1)
		if groups[si].note != "" && res == nil {
			rows++
		}
	}
	img := image.NewRGBA(image.Rect(0, 0, chartWidth, rows*rowHeight+2*margin))
	draw.Draw(img, img.Bounds(), image.NewUniform(colWhite), image.Point{}, draw.Src)
	y := margin + rowHeight
	text(img, margin, y, "dryexec benchmarks  "+m.start.Format(time.RFC3339)+"  "+m.String())
	y += rowHeight
	if cfg.note != "" {
		text(img, margin, y, cfg.note)
		y += rowHeight
	}
	text(img, margin, y, "bar: median; line: min to max (> : beyond the scale); grey: baseline; ms and MiB lower is better, /s higher is better")
	y += rowHeight
	for si, res := range sections {
		g := groups[si]
		y += rowHeight
		text(img, margin, y, g.title+" ["+g.unit.name+"]")
		y += rowHeight
		if res == nil {
			text(img, margin+14, y, "not measured: "+g.note)
			y += rowHeight
			continue
		}
		// The scale is set by the medians, not the maxima: one outlier
		// would otherwise squash every bar. A whisker past it is clipped.
		scale := 0.0
		for _, r := range res {
			scale = max(scale, r.median()*1.2)
		}
		if scale <= 0 {
			scale = 1
		}
		px := func(v float64) int { return barLeft + int(min(v/scale, 1)*barWidth) }
		for i, r := range res {
			label := ascii(r.name)
			if maxChars := (labelWidth - 14) / 7; len(label) > maxChars {
				label = label[:maxChars-3] + "..."
			}
			text(img, margin+14, y, label)
			c := colBar
			for _, b := range g.bases {
				if b == i {
					c = colBaseline
				}
			}
			top, bottom := y-11, y+1
			fill(img, image.Rect(barLeft, top, max(px(r.median()), barLeft+1), bottom), c)
			mid := (top + bottom) / 2
			fill(img, image.Rect(px(r.min()), mid, px(r.max())+1, mid+1), colWhisker)
			fill(img, image.Rect(px(r.min()), top+2, px(r.min())+1, bottom-2), colWhisker)
			fill(img, image.Rect(px(r.max()), top+2, px(r.max())+1, bottom-2), colWhisker)
			end := px(r.max()) + 6
			if r.max() > scale {
				text(img, end-2, y, ">")
				end += 8
			}
			text(img, end, y, g.unit.format(r.median()))
			y += rowHeight
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func fill(img *image.RGBA, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

// text draws s with its baseline at y.
func text(img *image.RGBA, x, y int, s string) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(colText), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(ascii(s))
}

// asciiReplacer spells the report's few non-ASCII characters in ASCII:
// basicfont has glyphs for ASCII only.
var asciiReplacer = strings.NewReplacer("→", "->", "×", "x", "…", "...", "—", "-")

// ascii is s with the known characters replaced and any other non-ASCII
// rune as '?'.
func ascii(s string) string {
	return strings.Map(func(r rune) rune {
		if r > 126 {
			return '?'
		}
		return r
	}, asciiReplacer.Replace(s))
}
