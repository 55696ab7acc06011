package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aiod/aiod/kernel/jupyter"
)

// Event is what a subscriber receives: a kernel message of the session, or
// the final result of one execution (Msg nil, Result set).
type Event struct {
	ExecID string           // the execution's msg_id (the message's parent)
	Ref    string           // the caller's reference for that execution, if any
	Msg    *jupyter.Message // a kernel message, or nil
	Result *Result          // the finished execution, or nil
}

func (e Event) size() int {
	if e.Msg != nil {
		return e.Msg.Size()
	}
	return 512
}

// control reports whether the event decides when something is finished;
// control events are exempt from the byte limit so that a flood of stream
// output can never make a subscriber miss its idle, reply or result.
func (e Event) control() bool {
	if e.Msg == nil {
		return true
	}
	switch e.Msg.Header.MsgType {
	case "status", "execute_reply", "shutdown_reply", "interrupt_reply", "kernel_info_reply":
		return true
	}
	return false
}

// Subscriber receives events. Deliver is called from runtime reader
// goroutines and must never block.
type Subscriber interface {
	Deliver(Event)
}

// ErrSlowConsumer is wrapped by the reason a Queue gives when its byte limit
// was reached.
var ErrSlowConsumer = errors.New("slow consumer")

// maxControl bounds the control events a queue holds, which are otherwise
// exempt from the byte limit.
const maxControl = 4096

// Queue is a bounded, byte-counted FIFO subscriber for one consumer (a
// WebSocket watcher, a test). Deliver never blocks: when the queued bytes
// would pass the limit the queue closes itself with a reason wrapping
// ErrSlowConsumer, and the consumer sees that reason from Next. Order is
// preserved; control events do not count against the limit.
type Queue struct {
	limit int

	mu      sync.Mutex
	items   []Event
	head    int
	bytes   int
	control int
	err     error // set once, when closed
	wake    chan struct{}
	done    chan struct{}
}

// NewQueue returns a queue holding at most limit bytes of non-control events.
func NewQueue(limit int) *Queue {
	return &Queue{limit: limit, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// Deliver enqueues e, or closes the queue when it is full.
func (q *Queue) Deliver(e Event) {
	q.mu.Lock()
	if q.err != nil {
		q.mu.Unlock()
		return
	}
	n, ctl := e.size(), e.control()
	switch {
	case ctl && q.control >= maxControl:
		q.closeLocked(fmt.Errorf("%w: %d control events queued", ErrSlowConsumer, q.control))
	case !ctl && q.bytes+n > q.limit:
		q.closeLocked(fmt.Errorf("%w: queue passed its limit of %s", ErrSlowConsumer, human(q.limit)))
	default:
		if ctl {
			q.control++
		} else {
			q.bytes += n
		}
		q.items = append(q.items, e)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Next returns the oldest event, waiting until one arrives, the queue is
// closed (its reason is returned), or ctx ends.
func (q *Queue) Next(ctx context.Context) (Event, error) {
	for {
		q.mu.Lock()
		if q.head < len(q.items) {
			e := q.items[q.head]
			q.items[q.head] = Event{}
			q.head++
			if e.control() {
				q.control--
			} else {
				q.bytes -= e.size()
			}
			if q.head == len(q.items) {
				q.items, q.head = q.items[:0], 0
			}
			q.mu.Unlock()
			return e, nil
		}
		err := q.err
		q.mu.Unlock()
		if err != nil {
			return Event{}, err
		}
		select {
		case <-q.wake:
		case <-q.done:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Close closes the queue with a reason; events already queued can still be
// read. Closing twice keeps the first reason.
func (q *Queue) Close(reason error) {
	q.mu.Lock()
	q.closeLocked(reason)
	q.mu.Unlock()
}

func (q *Queue) closeLocked(reason error) {
	if q.err != nil {
		return
	}
	if reason == nil {
		reason = errors.New("queue closed")
	}
	q.err = reason
	close(q.done)
}

// Done is closed when the queue is closed.
func (q *Queue) Done() <-chan struct{} { return q.done }

// Err is the reason the queue was closed, or nil.
func (q *Queue) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// Len is the number of events waiting.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) - q.head
}
