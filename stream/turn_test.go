package stream

import "testing"

// The turn goes to tickets in the order they joined; one that leaves the
// line is skipped, and one that gave up after its turn came passes it on.
func TestTurnstileOrder(t *testing.T) {
	var ts turnstile
	first := ts.join()
	second, third, fourth := ts.join(), ts.join(), ts.join()
	ready := func(k *ticket) bool {
		select {
		case <-k.ready:
			return true
		default:
			return false
		}
	}
	if !ready(first) || ready(second) || ready(third) || ready(fourth) {
		t.Fatal("only the first ticket should hold the turn")
	}
	second.done() // gave up waiting: leaves the line
	first.done()
	if !ready(third) || ready(fourth) {
		t.Fatal("the turn should pass over the ticket that left, to the third")
	}
	third.done()
	if !ready(fourth) {
		t.Fatal("the fourth ticket should hold the turn")
	}
	fourth.done()
	if k := ts.join(); !ready(k) {
		t.Fatal("a free turnstile should give the turn at once")
	}
}
