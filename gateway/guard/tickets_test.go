package guard

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
	"github.com/golang-jwt/jwt/v5"
)

func TestTicketsOnceAndTTL(t *testing.T) {
	clk := kerneltest.NewClock(time.Unix(1_800_000_000, 0))
	s := newTicketStore(30*time.Second, 0, 0, clk.Now)
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
	clk.Add(29 * time.Second)
	if _, ok := s.redeem(b); !ok {
		t.Fatal("a ticket failed within its lifetime")
	}
	d, _ := s.issue(who)
	clk.Add(30 * time.Second)
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
	clk := kerneltest.NewClock(time.Unix(1_800_000_000, 0))
	s := newTicketStore(10*time.Second, 100, 1000, clk.Now)
	for i := 0; i < 100; i++ {
		if _, err := s.issue(Caller{}); err != nil {
			t.Fatalf("ticket %d: %v", i, err)
		}
	}
	var full *ticketsFull
	if _, err := s.issue(Caller{}); !errors.As(err, &full) || full.caller != "" || full.retrySeconds() != 10 {
		t.Fatalf("ticket 101: %v, want the global limit with 10 s to wait", err)
	}
	clk.Add(10 * time.Second)
	if _, err := s.issue(Caller{}); err != nil {
		t.Fatalf("after the others expired: %v", err)
	}
	if n := s.len(); n != 1 {
		t.Fatalf("%d tickets held after the sweep, want 1", n)
	}
}

// Many goroutines racing to use one ticket: exactly one wins.
func TestTicketsRace(t *testing.T) {
	s := newTicketStore(time.Minute, 0, 0, nil)
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

// The per-caller limit: a caller at its limit is refused with the time
// until its oldest ticket expires; using a ticket, or its expiry, frees a
// place; other callers are not held up.
func TestTicketsPerCaller(t *testing.T) {
	clk := kerneltest.NewClock(time.Unix(1_800_000_000, 0))
	s := newTicketStore(30*time.Second, 100, 2, clk.Now)
	alice, bob := Caller{Method: "jwt", Subject: "alice"}, Caller{Method: "jwt", Subject: "bob"}
	first, _ := s.issue(alice)
	clk.Add(10 * time.Second)
	if _, err := s.issue(alice); err != nil {
		t.Fatal(err)
	}
	var full *ticketsFull
	if _, err := s.issue(alice); !errors.As(err, &full) || full.caller != "jwt:alice" || full.retrySeconds() != 20 {
		t.Fatalf("alice's third ticket: %v, want her limit with 20 s to wait", err)
	}
	if _, err := s.issue(bob); err != nil {
		t.Fatalf("bob while alice is at her limit: %v", err)
	}
	if _, ok := s.redeem(first); !ok {
		t.Fatal("redeem")
	}
	if _, err := s.issue(alice); err != nil {
		t.Fatalf("alice after using one: %v", err)
	}
	clk.Add(30 * time.Second) // all of alice's have expired
	for range 2 {
		if _, err := s.issue(alice); err != nil {
			t.Fatalf("alice after hers expired: %v", err)
		}
	}
}

// TestGuardTicketsPerCaller: one caller that holds its limit of unused
// tickets gets 429 with Retry-After and a message naming the flag; another
// caller still gets tickets; the global limit answers Retry-After too.
func TestGuardTicketsPerCaller(t *testing.T) {
	now := time.Now()
	gs := startGuarded(t, Config{JWTPublicKey: pemPublic(t, testKeys.rsa), MaxTicketsPerCaller: 3, MaxTickets: 5, TicketTTL: 20 * time.Second})
	bearer := func(sub string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"sub": sub, "exp": now.Add(time.Hour).Unix()})}
	}
	for i := range 3 {
		if r := gs.do(t, "POST", "/tickets", "", bearer("alice")); r.status != 200 {
			t.Fatalf("alice's ticket %d: %d %s", i, r.status, r.body)
		}
	}
	r := gs.do(t, "POST", "/tickets", "", bearer("alice"))
	ra, _ := strconv.Atoi(r.h.Get("Retry-After"))
	if r.status != 429 || ra < 1 || ra > 20 || !strings.Contains(r.body, "--max-tickets-per-caller 3") || !strings.Contains(r.body, "jwt:alice") {
		t.Errorf("alice's fourth ticket: %d Retry-After %q %s", r.status, r.h.Get("Retry-After"), r.body)
	}
	for i := range 2 {
		if r := gs.do(t, "POST", "/tickets", "", bearer("bob")); r.status != 200 {
			t.Fatalf("bob's ticket %d while alice is at her limit: %d %s", i, r.status, r.body)
		}
	}
	r = gs.do(t, "POST", "/tickets", "", bearer("carol"))
	ra, _ = strconv.Atoi(r.h.Get("Retry-After"))
	if r.status != 429 || ra < 1 || ra > 20 || !strings.Contains(r.body, "5 unused tickets") {
		t.Errorf("over the global limit: %d Retry-After %q %s", r.status, r.h.Get("Retry-After"), r.body)
	}
}

// mapTickets is a SharedTickets in memory: the cluster's bucket, for one
// test.
type mapTickets struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (m *mapTickets) Put(k string, v []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[k] = v
	return nil
}

func (m *mapTickets) Peek(k string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[k]
	return v, ok
}

func (m *mapTickets) Take(k string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[k]
	delete(m.m, k)
	return v, ok
}

// With a shared store, a ticket one replica issued is redeemed by another,
// once: not again there, nor at the replica that issued it; and it
// expires there as here.
func TestSharedTicketsWorkOnceAnywhere(t *testing.T) {
	clk := kerneltest.NewClock(time.Unix(1_800_000_000, 0))
	var shared SharedTickets = &mapTickets{m: map[string][]byte{}}
	a, b := newTicketStore(30*time.Second, 0, 0, clk.Now), newTicketStore(30*time.Second, 0, 0, clk.Now)
	a.shared.Store(&shared)
	b.shared.Store(&shared)
	who := Caller{Method: "jwt", Subject: "agent-7"}
	tk, err := a.issue(who)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := b.peek(tk); !ok || c.Key() != "jwt:agent-7" {
		t.Fatalf("peek at the other replica: %v %+v", ok, c)
	}
	if c, ok := b.redeem(tk); !ok || c.Key() != "jwt:agent-7" || !c.Ticket {
		t.Fatalf("redeem at the other replica: %v %+v", ok, c)
	}
	if _, ok := b.redeem(tk); ok {
		t.Fatal("a ticket redeemed twice at the other replica")
	}
	if _, ok := a.redeem(tk); ok {
		t.Fatal("a ticket redeemed again at the replica that issued it")
	}
	late, _ := a.issue(who)
	clk.Add(31 * time.Second)
	if _, ok := b.redeem(late); ok {
		t.Fatal("an expired ticket was redeemed at the other replica")
	}
}
