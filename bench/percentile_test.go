package bench

import (
	"slices"
	"testing"
	"time"
)

func TestPercentiles(t *testing.T) {
	if got := percentiles(nil, 50); !slices.Equal(got, []time.Duration{0}) {
		t.Fatalf("empty: got %v", got)
	}
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i))
	}
	orig := slices.Clone(ds)
	got := percentiles(ds, 1, 50, 90, 99, 100)
	if want := []time.Duration{1, 50, 90, 99, 100}; !slices.Equal(got, want) {
		t.Fatalf("1..100: got %v, want %v", got, want)
	}
	if !slices.Equal(ds, orig) {
		t.Fatal("percentiles reordered its input")
	}
	if got := percentiles([]time.Duration{7}, 50, 99); !slices.Equal(got, []time.Duration{7, 7}) {
		t.Fatalf("one sample: got %v", got)
	}
	if got := percentiles([]time.Duration{1, 2, 3}, 50, 90); !slices.Equal(got, []time.Duration{2, 3}) {
		t.Fatalf("1..3: got %v", got)
	}
}
