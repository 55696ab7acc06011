package sandbox

import (
	"sync"
	"testing"
)

// Two daemons claiming overlapping uid ranges at the same moment: exactly
// one gets them, every time (each used to check for the other, find
// nothing, then lock its own range).
func TestUIDClaimsAtOnce(t *testing.T) {
	was := uidLocks
	uidLocks = t.TempDir()
	t.Cleanup(func() { uidLocks = was })
	for round := range 50 {
		var wg sync.WaitGroup
		releases := make([]func(), 2)
		for i, r := range [][2]uint32{{1000, 1999}, {1500, 2499}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if release, err := lockUIDs(r[0], r[1]); err == nil {
					releases[i] = release
				}
			}()
		}
		wg.Wait()
		got := 0
		for _, release := range releases {
			if release != nil {
				got++
				release()
			}
		}
		if got != 1 {
			t.Fatalf("round %d: %d of two overlapping claims succeeded, want 1", round, got)
		}
	}
}
