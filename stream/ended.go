package stream

import (
	"container/list"
	"fmt"
	"time"
)

// How many ended sessions the registry remembers, and for how long: the
// next call on such an id is told that it got a fresh runtime, and why.
const (
	endedMax = 10_000
	endedTTL = time.Hour
)

// endedLog remembers recently ended named sessions by (tenant, language,
// id), the oldest first, bounded by endedMax entries and endedTTL: a
// tenant is told only of its own ids. Not safe for concurrent use: the
// registry's mu guards it.
type endedLog struct {
	max   int
	ttl   time.Duration
	order *list.List // of *endedEntry, oldest at the front
	byKey map[sessionKey]*list.Element
}

type endedEntry struct {
	key sessionKey
	why string // what ended it, e.g. "the session was deleted"
	at  time.Time
}

func newEndedLog(max int, ttl time.Duration) *endedLog {
	return &endedLog{max: max, ttl: ttl, order: list.New(), byKey: map[sessionKey]*list.Element{}}
}

// add records that the session k ended at now because of why.
func (l *endedLog) add(k sessionKey, why string, now time.Time) {
	if e := l.byKey[k]; e != nil {
		l.order.Remove(e)
	}
	l.byKey[k] = l.order.PushBack(&endedEntry{key: k, why: why, at: now})
	l.expire(now)
}

// take returns and forgets why k ended, with how long ago; ok is false when
// k did not end within the TTL (or was forgotten to keep the bound).
func (l *endedLog) take(k sessionKey, now time.Time) (why string, ago time.Duration, ok bool) {
	l.expire(now)
	e := l.byKey[k]
	if e == nil {
		return "", 0, false
	}
	l.order.Remove(e)
	delete(l.byKey, k)
	en := e.Value.(*endedEntry)
	return en.why, now.Sub(en.at), true
}

// Len is the number of sessions remembered.
func (l *endedLog) Len() int { return len(l.byKey) }

func (l *endedLog) expire(now time.Time) {
	for f := l.order.Front(); f != nil; f = l.order.Front() {
		en := f.Value.(*endedEntry)
		if len(l.byKey) <= l.max && now.Sub(en.at) < l.ttl {
			return
		}
		l.order.Remove(f)
		delete(l.byKey, en.key)
	}
}

// endReason is why a named session is remembered as ended, or "" when it is
// not remembered (shutdown ends everything; temporary sessions have no id).
func (s *Session) endReason(why string, now time.Time) string {
	switch why {
	case ClosedDeleted:
		return "the session was deleted"
	case ClosedIdle:
		s.mu.Lock()
		idle, limit := now.Sub(s.last), s.idle
		s.mu.Unlock()
		return fmt.Sprintf("the session was reclaimed after being idle for %s (limit %s)", secs(idle), secs(limit))
	}
	return ""
}

// secs renders a duration in whole seconds, as "300 s".
func secs(d time.Duration) string {
	return fmt.Sprintf("%d s", int64(d.Round(time.Second)/time.Second))
}
