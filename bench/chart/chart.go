// Package chart draws latency distributions as self-contained SVG
// (cumulative distributions on a log axis), for the benchmarks' results.
package chart

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
)

// Series is one latency distribution to draw.
type Series struct {
	Label     string
	Color     string
	Latencies []float64 // ms, sorted ascending
	P50, P99  float64   // ms, for the legend
}

// WriteCDF draws the cumulative distributions of ss on a log-x axis as a
// self-contained SVG: x is the latency in ms, y the share of calls at or
// under it; the legend gives each path's p50 and p99.
func WriteCDF(w io.Writer, title, subtitle string, ss []Series) error {
	const (
		W, H                   = 900, 520
		left, right, top, bott = 70, 250, 60, 60
	)
	pw, ph := float64(W-left-right), float64(H-top-bott)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		if len(s.Latencies) == 0 {
			continue
		}
		lo = math.Min(lo, s.Latencies[0])
		hi = math.Max(hi, s.Latencies[len(s.Latencies)-1])
	}
	if math.IsInf(lo, 0) || lo <= 0 {
		lo, hi = 0.1, 100
	}
	// Round the range out to 1-2-5 steps.
	lo, hi = niceDown(lo), niceUp(hi)
	if hi <= lo {
		hi = lo * 10
	}
	llo, lhi := math.Log10(lo), math.Log10(hi)
	x := func(v float64) float64 {
		v = math.Min(math.Max(v, lo), hi)
		return float64(left) + (math.Log10(v)-llo)/(lhi-llo)*pw
	}
	y := func(f float64) float64 { return float64(top) + (1-f)*ph }

	var b bytes.Buffer
	esc := func(s string) string {
		var e bytes.Buffer
		_ = xml.EscapeText(&e, []byte(s))
		return e.String()
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", left, esc(title))
	fmt.Fprintf(&b, `<text x="%d" y="42" fill="#555">%s</text>`+"\n", left, esc(subtitle))
	// Grid and ticks.
	for _, t := range ticks(lo, hi) {
		xx := x(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", xx, top, xx, H-bott)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", xx, H-bott+16, fmtTick(t))
	}
	for i := 0; i <= 10; i++ {
		f := float64(i) / 10
		yy := y(f)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, yy, W-right, yy)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%d%%</text>`+"\n", left-6, yy+4, i*10)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">latency per call, ms (log scale)</text>`+"\n", float64(left)+pw/2, H-bott+36)
	fmt.Fprintf(&b, `<text x="18" y="%.1f" text-anchor="middle" transform="rotate(-90 18 %.1f)">calls at or under this latency</text>`+"\n", float64(top)+ph/2, float64(top)+ph/2)
	// Curves.
	for i, s := range ss {
		n := len(s.Latencies)
		ly := float64(top) + 10 + float64(i)*44
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", W-right+14, ly, W-right+40, ly, s.Color)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f">%s</text>`+"\n", W-right+46, ly+4, esc(s.Label))
		if n == 0 {
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" fill="#a00">not measured</text>`+"\n", W-right+46, ly+20)
			continue
		}
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" fill="#555">p50 %s ms, p99 %s ms (n=%d)</text>`+"\n", W-right+46, ly+20,
			fmtMS(s.P50), fmtMS(s.P99), n)
		var pts bytes.Buffer
		step := max(1, n/800)
		prevY := y(0)
		for j := 0; j < n; j += step {
			xx := x(s.Latencies[j])
			fmt.Fprintf(&pts, "%.1f,%.1f %.1f,%.1f ", xx, prevY, xx, y(float64(j+1)/float64(n)))
			prevY = y(float64(j+1) / float64(n))
		}
		xx := x(s.Latencies[n-1])
		fmt.Fprintf(&pts, "%.1f,%.1f %.1f,%.1f", xx, prevY, xx, y(1))
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.Color, pts.String())
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

func fmtMS(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtTick(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("%g", math.Round(v))
	}
	return fmt.Sprintf("%g", v)
}

// steps125 are the 1-2-5 marks of a decade.
var steps125 = []float64{1, 2, 5}

func niceDown(v float64) float64 {
	d := math.Pow(10, math.Floor(math.Log10(v)))
	for i := len(steps125) - 1; i >= 0; i-- {
		if steps125[i]*d <= v*(1+1e-9) {
			return steps125[i] * d
		}
	}
	return d
}

func niceUp(v float64) float64 {
	d := math.Pow(10, math.Floor(math.Log10(v)))
	for _, s := range steps125 {
		if s*d >= v*(1-1e-9) {
			return s * d
		}
	}
	return 10 * d
}

// ticks are the 1-2-5 marks from lo to hi.
func ticks(lo, hi float64) []float64 {
	var out []float64
	for d := math.Pow(10, math.Floor(math.Log10(lo))); d <= hi*(1+1e-9); d *= 10 {
		for _, s := range steps125 {
			v := s * d
			if v >= lo*(1-1e-9) && v <= hi*(1+1e-9) {
				out = append(out, v)
			}
		}
	}
	return out
}
