package bench

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"
)

// BenchmarkBurstAdmission opens bursts of 32 new pandas sessions at once
// against four daemons started in the same run, alternating: the defaults
// (start gate of --max-concurrent-starts auto, per-runtime cgroups), the
// gate opened wide (64), the limits off, and both. It reports the time to
// the last answer and the median answer of each, and their ratios to the
// defaults: what the start gate and the cgroups cost or save. b.N is the
// number of bursts per daemon (at least 2).
func BenchmarkBurstAdmission(b *testing.B) {
	const burst = 32
	n := max(b.N, 2)
	off := []string{"AIO_RUNTIME_MEMORY_LIMIT=0", "AIO_RUNTIME_PIDS_LIMIT=0"}
	configs := []struct {
		name string
		env  []string
	}{
		{"defaults", nil},
		{"gate64", []string{"AIO_MAX_CONCURRENT_STARTS=64"}},
		{"nolimits", off},
		{"gate64-nolimits", append([]string{"AIO_MAX_CONCURRENT_STARTS=64"}, off...)},
	}
	b.ResetTimer()
	gws := make([]*gw, len(configs))
	for i, c := range configs {
		gws[i] = startGateway(b, append([]string{"AIO_CODE_BACKEND=kernel"}, c.env...)...)
		if _, err := gws[i].exec(map[string]any{"language": "python", "code": "print(1)", "session_id": "warm"}, "1\n"); err != nil {
			b.Fatal(err) // the template is up before the first burst
		}
	}
	last := make([][]time.Duration, len(configs))
	med := make([][]time.Duration, len(configs))
	for round := range n {
		for i, g := range gws {
			l, m, err := g.burst(burst, fmt.Sprintf("r%d", round))
			if err != nil {
				b.Fatalf("%s: %v", configs[i].name, err)
			}
			last[i], med[i] = append(last[i], l), append(med[i], m)
		}
	}
	b.StopTimer()
	for i, c := range configs {
		b.ReportMetric(p50ms(last[i]), c.name+"-last-ms")
		b.ReportMetric(p50ms(med[i]), c.name+"-p50-ms")
		if i > 0 {
			b.ReportMetric(p50ms(last[i])/p50ms(last[0]), c.name+"/defaults-last")
			b.ReportMetric(p50ms(med[i])/p50ms(med[0]), c.name+"/defaults-p50")
		}
	}
}

// burst opens n new sessions at once, each importing pandas, and returns
// when the last answered and the median answer; then it deletes them.
func (g *gw) burst(n int, prefix string) (last, median time.Duration, err error) {
	took := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			took[i], errs[i] = g.exec(map[string]any{"language": "python", "code": "import pandas as pd\nprint(1)",
				"session_id": fmt.Sprintf("%s-%d", prefix, i), "timeout": 300}, "1\n")
		}()
	}
	wg.Wait()
	last = time.Since(t0)
	for _, e := range errs {
		if e != nil {
			return 0, 0, e
		}
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	for i := range n {
		req, _ := http.NewRequest(http.MethodDelete, fmt.Sprintf("%s/v2/code/sessions/%s-%d", g.base, prefix, i), bytes.NewReader(nil))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := g.client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	time.Sleep(time.Second) // the kernels' exits settle before the next burst
	return last, took[n/2], nil
}
