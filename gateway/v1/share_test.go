package v1

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aiod/aiod/stream"
)

// testBackground is share's background without a daemon: a context that
// stop ends, and goroutines stop waits for.
type testBackground struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

func newTestBackground() *testBackground {
	b := &testBackground{}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b
}

func (b *testBackground) Ctx() context.Context { return b.ctx }

func (b *testBackground) Go(f func()) bool {
	if b.ctx.Err() != nil {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

func (b *testBackground) stop() {
	b.once.Do(func() {
		b.cancel()
		b.wg.Wait()
	})
}

// A slow listing holds no lock: a call for another key answers at once,
// callers of the same key share its one run, and a shutdown ends the wait
// of callers and the run's context.
func TestShareDoesNotQueueBehindSlowListing(t *testing.T) {
	bg := newTestBackground()
	defer bg.stop()
	stop := bg.stop
	s := bg
	var mu sync.Mutex
	m := map[string]*shared[string]{}
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce() // before bg.stop: a failed check must not leave the listing waiting
	slow := func(context.Context) (string, error) {
		if runs.Add(1) == 1 {
			close(started)
		}
		<-release
		return "slow", nil
	}
	got := make(chan string, 4)
	for range cap(got) {
		go func() {
			v, _ := share(s, &mu, m, "slow", time.Minute, time.Minute, slow)
			got <- v
		}()
	}
	<-started
	// The other callers take the lock for a moment as they join the run;
	// a lock held through the listing is never free. (Should it be, the
	// waiter gets it once the deferred release ends the listing.)
	free := make(chan struct{})
	go func() {
		mu.Lock()
		mu.Unlock()
		close(free)
	}()
	select {
	case <-free:
	case <-time.After(30 * time.Second):
		t.Fatal("the lock is held while a listing runs")
	}
	fast := make(chan string, 1)
	go func() {
		v, _ := share(s, &mu, m, "fast", time.Minute, time.Minute, func(context.Context) (string, error) { return "fast", nil })
		fast <- v
	}()
	select {
	case v := <-fast:
		if v != "fast" {
			t.Fatalf("fast: %q", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a call for another key waited behind the slow listing")
	}
	releaseOnce()
	for range cap(got) {
		if v := <-got; v != "slow" {
			t.Fatalf("slow: %q", v)
		}
	}
	if v, err := share(s, &mu, m, "slow", time.Minute, time.Minute, slow); v != "slow" || err != nil || runs.Load() != 1 {
		t.Fatalf("after: %q, %v; %d runs, want one shared and reused", v, err, runs.Load())
	}

	// A failure is not reused.
	fails := 0
	failing := func(context.Context) (string, error) { fails++; return "", errors.New("no") }
	for range 2 {
		if _, err := share(s, &mu, m, "failing", time.Minute, time.Minute, failing); err == nil {
			t.Fatal("failing: no error")
		}
	}
	if fails != 2 {
		t.Fatalf("a failed listing ran %d times for two calls, want 2", fails)
	}

	// Shutdown ends the wait and the context of a listing that runs, and
	// waits for the listing to return; no listing starts after it.
	ended := make(chan error, 1)
	hung := make(chan error, 1)
	running := make(chan struct{})
	go func() {
		_, err := share(s, &mu, m, "hung", time.Minute, time.Minute, func(ctx context.Context) (string, error) {
			close(running)
			<-ctx.Done()
			ended <- ctx.Err()
			return "", ctx.Err()
		})
		hung <- err
	}()
	<-running
	stop()
	select {
	case err := <-hung:
		if !errors.Is(err, stream.ErrShuttingDown) && !errors.Is(err, context.Canceled) {
			t.Fatalf("hung: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a caller waited past shutdown")
	}
	select {
	case <-ended:
	default:
		t.Fatal("shutdown returned before the listing did")
	}
	if _, err := share(s, &mu, m, "late", time.Minute, time.Minute, func(context.Context) (string, error) {
		t.Error("a listing ran after shutdown")
		return "", nil
	}); !errors.Is(err, stream.ErrShuttingDown) {
		t.Fatalf("a call after shutdown: %v, want ErrShuttingDown", err)
	}
}
