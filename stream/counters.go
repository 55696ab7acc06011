package stream

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/aiod/aiod/kernel/jupyter"
)

// Names of the counters aiod keeps, with what their label holds. Every
// count any part of aiod keeps is one of these, in one Counters, so that a
// metrics endpoint can serve them all.
const (
	StaleMessages  = "mux_stale_messages"    // label "": messages of a replaced runtime, dropped
	WSCloses       = "ws_closes"             // label: why a WebSocket was closed (slow_consumer, ping_timeout, peer_closed, ...)
	WSDrops        = "ws_drops"              // label: why messages bound for a WebSocket were dropped
	WSRefused      = "ws_refused"            // label: why an upgrade was refused (origin)
	KernelDrops    = jupyter.DroppedMessages // label: bad_signature, malformed or duplicate
	IdleReclaims   = "idle_reclaims"         // label: language
	RuntimeDeaths  = "runtime_deaths"        // label: language
	RuntimeStarts  = "runtime_starts"        // label: ok or failed
	OutputTruncate = "output_truncations"    // label ""
)

// Counters is a set of named, labelled counters. It implements
// jupyter.Counter, so runtimes count into it too. The zero value is not
// ready: use NewCounters.
type Counters struct {
	m sync.Map // counterKey -> *atomic.Int64
}

type counterKey struct{ name, label string }

// NewCounters returns an empty set.
func NewCounters() *Counters { return &Counters{} }

// Count adds n to the counter (name, label).
func (c *Counters) Count(name, label string, n int64) {
	k := counterKey{name, label}
	v, ok := c.m.Load(k)
	if !ok {
		v, _ = c.m.LoadOrStore(k, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(n)
}

// Get returns the counter (name, label).
func (c *Counters) Get(name, label string) int64 {
	if v, ok := c.m.Load(counterKey{name, label}); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// Count is one counter's value.
type Count struct {
	Name, Label string
	Value       int64
}

// Snapshot returns every counter, sorted by name then label.
func (c *Counters) Snapshot() []Count {
	var out []Count
	c.m.Range(func(k, v any) bool {
		ck := k.(counterKey)
		out = append(out, Count{ck.name, ck.label, v.(*atomic.Int64).Load()})
		return true
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Label < out[j].Label
	})
	return out
}
