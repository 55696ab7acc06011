package call

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"
)

// goroutineID is the calling goroutine's number, from its stack's header.
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	return string(b[:bytes.IndexByte(b, ' ')])
}

// Go hands work to a worker that waits for more, so that sequential work
// runs on the same few goroutines (whose stacks have grown already); Close
// ends the idle workers and waits for them, and Go refuses work from then on.
func TestGoReusesWorkersAndCloseEndsThem(t *testing.T) {
	c := &Core{idle: make(chan func())}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	before := runtime.NumGoroutine()
	seen := map[string]int{}
	for range 50 {
		id := make(chan string)
		if !c.Go(func() { id <- goroutineID() }) {
			t.Fatal("Go refused work before Close")
		}
		seen[<-id]++
		time.Sleep(time.Millisecond) // time for the worker to get back to its wait; one that does not is a new goroutine, which the bound below allows for
	}
	if len(seen) > 25 {
		t.Errorf("50 pieces of work, one after another, ran on %d goroutines; want a few reused workers", len(seen))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close with idle workers: %v", err)
	}
	if c.Go(func() { t.Error("work ran after Close") }) {
		t.Error("Go took work after Close")
	}
	// A worker ends a moment after Close sees it done.
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before the workers", n, before)
	}
}
