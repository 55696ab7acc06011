package stream

import (
	"sync"
	"time"

	"github.com/aiod/aiod/stream/execution"
)

// recorder is a Subscriber that keeps every event, in order.
type recorder struct {
	mu   sync.Mutex
	evs  []execution.Event
	read int
	poke chan struct{}
}

func newRecorder() *recorder { return &recorder{poke: make(chan struct{}, 1)} }

func (r *recorder) Deliver(e execution.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// next returns the oldest event not read yet, waiting up to d for one.
func (r *recorder) next(d time.Duration) (execution.Event, bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		if r.read < len(r.evs) {
			e := r.evs[r.read]
			r.read++
			r.mu.Unlock()
			return e, true
		}
		r.mu.Unlock()
		select {
		case <-r.poke:
		case <-deadline.C:
			return execution.Event{}, false
		}
	}
}

// all returns every event so far.
func (r *recorder) all() []execution.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]execution.Event(nil), r.evs...)
}
