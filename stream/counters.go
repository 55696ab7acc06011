package stream

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aiod/aiod/kernel/jupyter"
)

// Names of the counters the session layer keeps, with what their label
// holds. Every count any part of aiod keeps is in one Counters, so that a
// metrics endpoint can serve them all; the surfaces that count (the HTTP
// server, WebSockets, MCP) name and describe theirs in their own packages.
// A counter with several labels joins their values with Labels, in the
// order its Family lists them.
const (
	StaleMessages    = "mux_stale_messages"    // label "": messages of a replaced runtime, dropped
	KernelDrops      = jupyter.DroppedMessages // label: bad_signature, malformed or duplicate
	IdleReclaims     = "idle_reclaims"         // label: language
	RuntimeDeaths    = "runtime_deaths"        // labels: language, cause (DeathCause)
	RuntimeStarts    = "runtime_starts"        // labels: language, backend, mode (cold or pool), result (ok or failed)
	OutputTruncate   = "output_truncations"    // label ""
	ExecutionsRun    = "executions"            // labels: language, backend, status (ok, error, timeout)
	OutputBytes      = "output_bytes"          // label: language; bytes of output message content received
	PoolTakes        = "pool_takes"            // labels: language, result (hit or miss)
	AdmissionRejects = "admission_rejects"     // label: reason (Reject* constants)
	// ExecutionStoreErrors counts failed writes of the execution store's
	// file (label ""); the gateway counts them.
	ExecutionStoreErrors = "execution_store_errors"
)

// Names of the durations aiod observes, in seconds (histograms, kept by the
// Observer; Counters only hands them on).
const (
	ExecutionSeconds = "execution_duration_seconds"     // labels: language, backend
	StartSeconds     = "runtime_start_duration_seconds" // labels: language, backend, mode
)

// Family describes one counter or duration for whoever serves it: what it
// means and the names of the values its label joins.
type Family struct {
	Help   string
	Labels []string
}

// Families describes every counter and duration above. A counter missing
// from it is still served, with one label named "label".
var Families = map[string]Family{
	StaleMessages:        {"Messages from a runtime that was replaced, dropped by the session's multiplexer.", nil},
	KernelDrops:          {"Kernel messages dropped by the kernel transports, by reason.", []string{"reason"}},
	IdleReclaims:         {"Idle sessions reclaimed.", []string{"language"}},
	RuntimeDeaths:        {"Runtimes (kernels, REPLs) that died on their own, by cause.", []string{"language", "cause"}},
	RuntimeStarts:        {"Runtime starts for sessions, cold or taken from a prewarm pool.", []string{"language", "backend", "mode", "result"}},
	OutputTruncate:       {"Executions whose output went over the output budget.", nil},
	ExecutionsRun:        {"Executions that produced a result, by status.", []string{"language", "backend", "status"}},
	OutputBytes:          {"Bytes of output message content received from runtimes.", []string{"language"}},
	PoolTakes:            {"Runtime requests served by a prewarm pool (hit) or started cold because it was empty (miss).", []string{"language", "result"}},
	AdmissionRejects:     {"Calls refused by an admission limit (session caps, the start queue), by reason.", []string{"reason"}},
	ExecutionStoreErrors: {"Writes of the execution store's file (--state-dir) that failed, such as on a full disk; what failed is written again at the next flush.", nil},
	ExecutionSeconds:     {"Time from sending the code to the runtime to the result (queueing and runtime starts not included).", []string{"language", "backend"}},
	StartSeconds:         {"Time a successful runtime start took.", []string{"language", "backend", "mode"}},
}

// LabelSep joins the values of a counter's labels (no value holds it).
const LabelSep = "|"

// Labels joins label values into one counter label.
func Labels(v ...string) string { return strings.Join(v, LabelSep) }

// SplitLabels is the inverse of Labels for a counter of n labels: it always
// returns n values (missing ones empty, extra text kept in the last).
func SplitLabels(label string, n int) []string {
	if n == 0 {
		return nil
	}
	if n == 1 {
		return []string{label}
	}
	out := strings.SplitN(label, LabelSep, n)
	for len(out) < n {
		out = append(out, "")
	}
	return out
}

// Observer receives durations. The metrics endpoint keeps them as
// histograms; without one they are dropped.
type Observer interface {
	Observe(name, label string, v float64)
}

// Counters is a set of named, labelled counters. It implements
// jupyter.Counter, so runtimes count into it too. The zero value is not
// ready: use NewCounters.
type Counters struct {
	m   sync.Map // counterKey -> *atomic.Int64
	obs atomic.Pointer[Observer]
}

type counterKey struct{ name, label string }

// NewCounters returns an empty set.
func NewCounters() *Counters { return &Counters{} }

// Count adds n to the counter (name, label).
func (c *Counters) Count(name, label string, n int64) {
	c.Cell(name, label).Add(n)
}

// Cell returns the counter (name, label) itself, for a caller that counts
// into it often (it is created at zero when missing).
func (c *Counters) Cell(name, label string) *atomic.Int64 {
	k := counterKey{name, label}
	v, ok := c.m.Load(k)
	if !ok {
		v, _ = c.m.LoadOrStore(k, new(atomic.Int64))
	}
	return v.(*atomic.Int64)
}

// Get returns the counter (name, label).
func (c *Counters) Get(name, label string) int64 {
	if v, ok := c.m.Load(counterKey{name, label}); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// SetObserver sets where durations go.
func (c *Counters) SetObserver(o Observer) { c.obs.Store(&o) }

// Observe hands a duration (or any value) to the observer, if any.
func (c *Counters) Observe(name, label string, v float64) {
	if o := c.obs.Load(); o != nil {
		(*o).Observe(name, label, v)
	}
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

// DeathCause is the runtime_deaths cause of a runtime's error: the signal
// that killed it (SIGKILL, SIGSEGV, ...), "exit" when it exited by itself,
// "heartbeat" when it stopped answering, "other" otherwise. The set is
// small and fixed, as a metric label must be.
func DeathCause(err error) string {
	d := deadError(err)
	switch {
	case d == nil:
		return "other"
	case d.Signal != "" && strings.HasPrefix(d.Signal, "SIG"):
		return d.Signal
	case d.Signal != "":
		return "signal"
	case d.ExitCode >= 0:
		return "exit"
	case strings.Contains(d.Cause, "heartbeat"):
		return "heartbeat"
	}
	return "other"
}
