package chart

import (
	"slices"
	"testing"
)

func TestTicks(t *testing.T) {
	if got := ticks(niceDown(2.3), niceUp(61)); !slices.Equal(got, []float64{2, 5, 10, 20, 50, 100}) {
		t.Errorf("ticks %v", got)
	}
	if niceDown(0.7) != 0.5 || niceUp(0.7) != 1 || niceUp(100) != 100 {
		t.Errorf("nice: %v %v %v", niceDown(0.7), niceUp(0.7), niceUp(100))
	}
}
