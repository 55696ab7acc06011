package compare

import (
	"math"
	"slices"
)

// Percentile is the nearest-rank p-th percentile (p in (0, 100]) of xs,
// which it leaves unchanged; NaN when xs is empty.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return percentileSorted(s, p)
}

func percentileSorted(s []float64, p float64) float64 {
	rank := int(math.Ceil(float64(len(s))*p/100 - 1e-9))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// Summary is what one measured path gives.
type Summary struct {
	Calls     int       `json:"calls"`
	Errors    int       `json:"errors"`
	Seconds   float64   `json:"seconds,omitempty"`
	PerSecond float64   `json:"executions_per_second,omitempty"`
	P50       float64   `json:"p50_ms"`
	P90       float64   `json:"p90_ms"`
	P99       float64   `json:"p99_ms"`
	Max       float64   `json:"max_ms"`
	Latencies []float64 `json:"-"`               // milliseconds, sorted
	Err       string    `json:"error,omitempty"` // why the path could not be measured
}

// summarize builds a Summary from latencies in ms (any order).
func summarize(lats []float64, errors int, seconds float64) *Summary {
	s := slices.Clone(lats)
	slices.Sort(s)
	sum := &Summary{Calls: len(s), Errors: errors, Seconds: seconds, Latencies: s}
	if seconds > 0 {
		sum.PerSecond = float64(len(s)) / seconds
	}
	if len(s) > 0 {
		sum.P50, sum.P90, sum.P99 = percentileSorted(s, 50), percentileSorted(s, 90), percentileSorted(s, 99)
		sum.Max = s[len(s)-1]
	}
	return sum
}

// ok says the summary holds a measurement.
func (s *Summary) ok() bool { return s != nil && s.Err == "" && s.Calls > 0 }

// permutations lists every order of 0..n-1 (Heap's algorithm). Cycling
// through them round by round makes every path follow every other path
// equally often, so one path's after-effects (a server still busy after
// its answer) do not always land on the same next path.
func permutations(n int) [][]int {
	a := make([]int, n)
	for i := range a {
		a[i] = i
	}
	var out [][]int
	var gen func(k int)
	gen = func(k int) {
		if k <= 1 {
			out = append(out, slices.Clone(a))
			return
		}
		for i := 0; i < k; i++ {
			gen(k - 1)
			if k%2 == 0 {
				a[i], a[k-1] = a[k-1], a[i]
			} else {
				a[0], a[k-1] = a[k-1], a[0]
			}
		}
	}
	gen(n)
	return out
}
