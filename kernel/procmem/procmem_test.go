package procmem

import (
	"os"
	"testing"
)

// TestRollup: this process has memory, and proportionally no more than it
// holds; a pid that does not exist reads as zeros.
func TestRollup(t *testing.T) {
	rss, pss := Rollup(os.Getpid())
	if rss <= 0 || pss <= 0 || pss > rss {
		t.Errorf("this process: rss %d, pss %d", rss, pss)
	}
	if rss, pss := Rollup(-1); rss != 0 || pss != 0 {
		t.Errorf("no process: rss %d, pss %d", rss, pss)
	}
}
