package guard

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestTicketsOnceAndTTL(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	s := newTicketStore(30*time.Second, 0, clk.now)
	who := Caller{Method: "jwt", Subject: "agent-7"}
	a, err := s.issue(who)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.issue(who)
	if a == b || len(a) != 43 {
		t.Fatalf("tickets %q and %q: want two distinct 43-character tickets", a, b)
	}
	c, ok := s.redeem(a)
	if !ok || c.Subject != "agent-7" || c.Method != "jwt" || !c.Ticket || c.Key() != "jwt:agent-7" {
		t.Fatalf("first use: %v %+v", ok, c)
	}
	if _, ok := s.redeem(a); ok {
		t.Fatal("a ticket worked twice")
	}
	clk.add(29 * time.Second)
	if _, ok := s.redeem(b); !ok {
		t.Fatal("a ticket failed within its lifetime")
	}
	d, _ := s.issue(who)
	clk.add(30 * time.Second)
	if _, ok := s.redeem(d); ok {
		t.Fatal("a ticket worked after its TTL")
	}
	for _, bad := range []string{"", "x", a + "x", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"} {
		if _, ok := s.redeem(bad); ok {
			t.Fatalf("ticket %q was accepted", bad)
		}
	}
}

// The store is bounded: past max unused tickets it refuses, and expired
// ones are swept to make room.
func TestTicketsBounded(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	s := newTicketStore(10*time.Second, 100, clk.now)
	for i := 0; i < 100; i++ {
		if _, err := s.issue(Caller{}); err != nil {
			t.Fatalf("ticket %d: %v", i, err)
		}
	}
	if _, err := s.issue(Caller{}); err != errTicketsFull {
		t.Fatalf("ticket 101: %v, want errTicketsFull", err)
	}
	clk.add(10 * time.Second)
	if _, err := s.issue(Caller{}); err != nil {
		t.Fatalf("after the others expired: %v", err)
	}
	if n := s.len(); n != 1 {
		t.Fatalf("%d tickets held after the sweep, want 1", n)
	}
}

// Many goroutines racing to use one ticket: exactly one wins.
func TestTicketsRace(t *testing.T) {
	s := newTicketStore(time.Minute, 0, nil)
	for round := 0; round < 50; round++ {
		tk, err := s.issue(Caller{Method: "token"})
		if err != nil {
			t.Fatal(err)
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, ok := s.redeem(tk); ok {
					wins.Add(1)
				}
				_, _ = s.issue(Caller{})
			}()
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("round %d: %d goroutines used the ticket", round, wins.Load())
		}
	}
}
