package guard

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccy/go-json"
)

// DefaultTicketTTL is how long a ticket lives unless configured.
const DefaultTicketTTL = 30 * time.Second

// DefaultMaxTickets bounds the unused tickets kept at once.
const DefaultMaxTickets = 10000

// DefaultMaxTicketsPerCaller bounds the unused tickets one caller holds.
const DefaultMaxTicketsPerCaller = 1000

// ticketsFull is issue's refusal: a limit is reached, and Retry is when the
// oldest ticket that counts against it expires.
type ticketsFull struct {
	caller string // the caller key when the per-caller limit was reached; "" for the global one
	held   int
	limit  int
	retry  time.Duration
}

func (e *ticketsFull) Error() string {
	if e.caller != "" {
		return fmt.Sprintf("this caller (%s) holds %d unused tickets, the limit per caller (--max-tickets-per-caller %d)", e.caller, e.held, e.limit)
	}
	return fmt.Sprintf("%d unused tickets are waiting, the limit for all callers", e.held)
}

// retrySeconds is when a ticket slot frees, in whole seconds, at least 1.
func (e *ticketsFull) retrySeconds() int { return max(1, int(math.Ceil(e.retry.Seconds()))) }

// ticketStore holds short-lived, single-use tickets: for what cannot send
// a header (a browser's WebSocket, a link, an <img>), so that a long-lived
// credential need not travel in a URL. A ticket is 32 random bytes in
// base64url; the store keeps only its SHA-256, with the caller that asked
// for it and its expiry. It starts no goroutine: expired tickets are swept
// when new ones are issued. Safe for concurrent use.
type ticketStore struct {
	ttl       time.Duration
	max       int // unused tickets held at once
	perCaller int // unused tickets one caller (Caller.Key) holds at once
	now       func() time.Time

	// shared, when set, is the cluster's ticket store: a ticket issued
	// here is put there too, and it is redeemed there (once, by whichever
	// replica the ticket is brought to). The counts of unused tickets
	// stay this replica's own.
	shared atomic.Pointer[SharedTickets]

	mu        sync.Mutex // guards below
	m         map[[32]byte]ticketEntry
	held      map[string]int // tickets in m by caller key
	lastSweep time.Time
}

type ticketEntry struct {
	expires time.Time
	caller  Caller
}

func newTicketStore(ttl time.Duration, max, perCaller int, now func() time.Time) *ticketStore {
	if ttl <= 0 {
		ttl = DefaultTicketTTL
	}
	if max <= 0 {
		max = DefaultMaxTickets
	}
	if perCaller <= 0 {
		perCaller = DefaultMaxTicketsPerCaller
	}
	if now == nil {
		now = time.Now
	}
	return &ticketStore{ttl: ttl, max: max, perCaller: perCaller, now: now,
		m: map[[32]byte]ticketEntry{}, held: map[string]int{}}
}

// issue makes a ticket for c. It fails with a *ticketsFull when c holds
// perCaller unused tickets, or when max are alive in all.
func (s *ticketStore) issue(c Caller) (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("make a ticket: %w", err)
	}
	t := base64.RawURLEncoding.EncodeToString(raw[:])
	key := c.Key()
	now := s.now()
	c.Ticket = true
	k := sha256.Sum256([]byte(t))
	e := ticketEntry{expires: now.Add(s.ttl), caller: c}
	s.mu.Lock()
	if len(s.m) >= s.max || s.held[key] >= s.perCaller || now.Sub(s.lastSweep) >= s.ttl {
		s.sweepLocked(now)
	}
	if n := s.held[key]; n >= s.perCaller {
		defer s.mu.Unlock()
		return "", &ticketsFull{caller: key, held: n, limit: s.perCaller, retry: s.oldestLocked(key, now)}
	}
	if len(s.m) >= s.max {
		defer s.mu.Unlock()
		return "", &ticketsFull{held: len(s.m), limit: s.max, retry: s.oldestLocked("", now)}
	}
	s.m[k] = e // counted now, so that the quotas hold while the cluster's store is written
	s.held[key]++
	s.mu.Unlock()
	if sh := s.shared.Load(); sh != nil {
		// Outside the lock: other tickets are issued and redeemed
		// meanwhile.
		b, _ := json.Marshal(sharedTicket{Caller: c, Expires: e.expires.UnixMilli()})
		if err := (*sh).Put(hex.EncodeToString(k[:]), b); err != nil {
			s.mu.Lock()
			if _, ok := s.m[k]; ok {
				s.forgetLocked(k, e)
			}
			s.mu.Unlock()
			return "", fmt.Errorf("make a ticket: the cluster's ticket store: %w", err)
		}
	}
	return t, nil
}

// SharedTickets is a store of tickets every replica of a cluster reaches
// (gateway/cluster): keys are tickets' SHA-256 in hex, values what the
// guard puts. Each call is bounded by the store.
type SharedTickets interface {
	Put(key string, value []byte) error
	// Take returns the value and deletes it, once: of two takes of a key
	// at once, one gets it.
	Take(key string) ([]byte, bool)
	Peek(key string) ([]byte, bool)
}

// sharedTicket is a ticket as the cluster's store keeps it.
type sharedTicket struct {
	Caller  Caller `json:"caller"`
	Expires int64  `json:"expires"` // unix milliseconds
}

// SetSharedTickets makes tickets the cluster's: any replica redeems a
// ticket any replica issued, once.
func (g *Guard) SetSharedTickets(st SharedTickets) { g.tickets.shared.Store(&st) }

// fromShared looks t up in the cluster's store: taken (redeem) or not.
func (s *ticketStore) fromShared(sh SharedTickets, k [32]byte, take bool) (Caller, bool) {
	get := sh.Peek
	if take {
		get = sh.Take
	}
	b, ok := get(hex.EncodeToString(k[:]))
	var st sharedTicket
	if !ok || json.Unmarshal(b, &st) != nil || !s.now().Before(time.UnixMilli(st.Expires)) {
		return Caller{}, false
	}
	return st.Caller, true
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
	if ok {
		s.forgetLocked(k, e)
	}
	s.mu.Unlock()
	if sh := s.shared.Load(); sh != nil {
		return s.fromShared(*sh, k, true)
	}
	if !ok || !now.Before(e.expires) {
		return Caller{}, false
	}
	return e.caller, true
}

// peek is redeem without using the ticket up.
func (s *ticketStore) peek(t string) (Caller, bool) {
	if len(t) != 43 {
		return Caller{}, false
	}
	k := sha256.Sum256([]byte(t))
	now := s.now()
	s.mu.Lock()
	e, ok := s.m[k]
	s.mu.Unlock()
	if sh := s.shared.Load(); sh != nil && !ok {
		return s.fromShared(*sh, k, false)
	}
	if !ok || !now.Before(e.expires) {
		return Caller{}, false
	}
	return e.caller, true
}

func (s *ticketStore) forgetLocked(k [32]byte, e ticketEntry) {
	delete(s.m, k)
	key := e.caller.Key()
	if s.held[key]--; s.held[key] <= 0 {
		delete(s.held, key)
	}
}

// oldestLocked is how long until the first of key's tickets (of anyone's,
// for "") expires; s.mu is held.
func (s *ticketStore) oldestLocked(key string, now time.Time) time.Duration {
	first := now.Add(s.ttl)
	for _, e := range s.m {
		if (key == "" || e.caller.Key() == key) && e.expires.Before(first) {
			first = e.expires
		}
	}
	return first.Sub(now)
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
			s.forgetLocked(k, e)
		}
	}
	s.lastSweep = now
}
