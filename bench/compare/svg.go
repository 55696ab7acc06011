package compare

import (
	"fmt"
	"io"

	"github.com/aiod/aiod/bench/chart"
)

// WriteSVG draws the sequential latency distributions of the four paths.
func (r *Result) WriteSVG(w io.Writer) error {
	colors := map[string]string{Floor: "#222222", REST: "#1f77b4", WS: "#2ca02c", Jupyter: "#d62728"}
	var ss []chart.Series
	for _, p := range []string{Floor, REST, WS, Jupyter} {
		s := chart.Series{Label: pathLabel[p], Color: colors[p]}
		if run := r.Runs["seq/"+p]; run.ok() {
			s.Latencies, s.P50, s.P99 = run.Latencies, run.P50, run.P99
		}
		ss = append(ss, s)
	}
	title := "`pass` + token print, sequential: latency per call (CDF)"
	sub := fmt.Sprintf("aiobench compare, %s mode, %s, %d cores, Linux %s, %d interleaved rounds",
		r.Mode, r.Date, r.Machine.Cores, r.Machine.Kernel, r.Settings.SequentialRounds)
	return chart.WriteCDF(w, title, sub, ss)
}
