package guard

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultTicketTTL is how long a ticket lives unless configured.
const DefaultTicketTTL = 30 * time.Second

// DefaultMaxTickets bounds the unused tickets kept at once.
const DefaultMaxTickets = 10000

// errTicketsFull is returned by issue when MaxTickets unused tickets wait.
var errTicketsFull = errors.New("too many unused tickets")

// ticketStore holds short-lived, single-use tickets: for what cannot send
// a header (a browser's WebSocket, a link, an <img>), so that a long-lived
// credential need not travel in a URL. A ticket is 32 random bytes in
// base64url; the store keeps only its SHA-256, with the caller that asked
// for it and its expiry. It starts no goroutine: expired tickets are swept
// when new ones are issued. Safe for concurrent use.
type ticketStore struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu        sync.Mutex // guards below
	m         map[[32]byte]ticketEntry
	lastSweep time.Time
}

type ticketEntry struct {
	expires time.Time
	caller  Caller
}

func newTicketStore(ttl time.Duration, max int, now func() time.Time) *ticketStore {
	if ttl <= 0 {
		ttl = DefaultTicketTTL
	}
	if max <= 0 {
		max = DefaultMaxTickets
	}
	if now == nil {
		now = time.Now
	}
	return &ticketStore{ttl: ttl, max: max, now: now, m: map[[32]byte]ticketEntry{}}
}

// issue makes a ticket for c. It fails with errTicketsFull when max unused
// tickets are still alive.
func (s *ticketStore) issue(c Caller) (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("make a ticket: %w", err)
	}
	t := base64.RawURLEncoding.EncodeToString(raw[:])
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= s.max || now.Sub(s.lastSweep) >= s.ttl {
		s.sweepLocked(now)
	}
	if len(s.m) >= s.max {
		return "", errTicketsFull
	}
	c.Ticket = true
	s.m[sha256.Sum256([]byte(t))] = ticketEntry{expires: now.Add(s.ttl), caller: c}
	return t, nil
}

// redeem uses up a ticket: it reports the caller it was issued to when
// the ticket exists and has not expired, and forgets it either way.
func (s *ticketStore) redeem(t string) (Caller, bool) {
	if len(t) != 43 { // base64url of 32 bytes
		return Caller{}, false
	}
	k := sha256.Sum256([]byte(t))
	now := s.now()
	s.mu.Lock()
	e, ok := s.m[k]
	delete(s.m, k)
	s.mu.Unlock()
	if !ok || !now.Before(e.expires) {
		return Caller{}, false
	}
	return e.caller, true
}

// len is the number of tickets held, expired ones included until swept.
func (s *ticketStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func (s *ticketStore) sweepLocked(now time.Time) {
	for k, e := range s.m {
		if !now.Before(e.expires) {
			delete(s.m, k)
		}
	}
	s.lastSweep = now
}
