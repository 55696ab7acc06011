package stream

import "sync"

// turnstile hands a session's turn to one caller at a time, in the order
// the callers joined its line: a caller descheduled between its arrival
// and its wait is never overtaken by one that arrived after it.
type turnstile struct {
	mu   sync.Mutex
	held bool
	line []*ticket // waiting, oldest first
}

// ticket is one caller's place in a turnstile's line.
type ticket struct {
	ts    *turnstile
	ready chan struct{} // closed, under ts.mu, when the turn is this ticket's
}

// join puts a caller in line; its ticket's ready is closed at once when
// nobody holds the turn or waits for it.
func (ts *turnstile) join() *ticket {
	t := &ticket{ts: ts, ready: make(chan struct{})}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if !ts.held {
		ts.held = true
		close(t.ready)
	} else {
		ts.line = append(ts.line, t)
	}
	return t
}

// done gives the turn to the next in line when the ticket holds it, or
// leaves the line when it does not (a caller that gave up waiting). Call
// it once per ticket.
func (t *ticket) done() {
	ts := t.ts
	ts.mu.Lock()
	defer ts.mu.Unlock()
	select {
	case <-t.ready:
		if len(ts.line) == 0 {
			ts.held = false
			return
		}
		next := ts.line[0]
		ts.line = ts.line[1:]
		close(next.ready)
	default:
		for i, w := range ts.line {
			if w == t {
				ts.line = append(ts.line[:i:i], ts.line[i+1:]...)
				return
			}
		}
	}
}
