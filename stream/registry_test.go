package stream

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Background work asked for while Close runs is either waited for by Close
// or not started on the registry's WaitGroup at all: an Add racing Close's
// Wait would be reported by -race (and can panic without it).
func TestRegistryBackgroundDuringClose(t *testing.T) {
	for range 20 {
		r := NewRegistry(Config{})
		var stop atomic.Bool
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					r.goUnlessClosed(func() {})
					r.background(func() {})
				}
			}()
		}
		time.Sleep(time.Millisecond) // time for the goroutines to be at it when Close comes
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := r.Close(ctx); err != nil {
			t.Fatalf("Close: %v", err)
		}
		cancel()
		stop.Store(true)
		wg.Wait()
	}
}
