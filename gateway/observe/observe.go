// Package observe serves the agent_sandbox reference's observation
// routes, /v1/sandbox/observe/*: a live reading of the caller's sandbox
// (its cgroup's CPU and memory, its processes, its disks), observations
// that sample it at an interval, and reports of them, kept as gzip'd JSON
// lines in the state directory.
//
// The sandbox is the caller's tenant under tenant isolation (its group,
// every process of its uid, its home, /tmp and working folder); without
// it, the runtimes of the caller's sessions and what they started, and
// the working folder. Reading never makes a tenant's sandbox or counts as
// its use: an observer does not keep a tenant from idling.
//
// A tenant runs one observation at a time. "capture" writes every sample
// and event to its run file; "guardrail" writes only events and keeps
// the last samples in memory, and writes a report by itself when a
// guardrail trips (an OOM kill, memory, processes or a disk near their
// limit), at most once a minute. Both stop at their duration, at a stop
// (which writes a report), or at aiod's stop (a report with reason
// "shutdown").
package observe

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fasthttp/router"

	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/kernel/jupyter"
)

// Bounds of what observation takes.
const (
	maxRunning = 64 // observations running at once, all tenants
	// samplesPerSecond bounds the samples of all observations together
	// (one costs aiod about 5 ms of CPU for a tenant of 20 sessions).
	samplesPerSecond = 16
	maxReports       = 32       // a tenant's; the oldest goes when a new one comes
	maxRunBytes      = 32 << 20 // of one observation's run file
	minInterval      = 250 * time.Millisecond
	maxInterval      = time.Hour
	defaultInterval  = time.Second
	maxDuration      = 24 * time.Hour // an observation without a duration stops then too
	recentEvents     = 50             // kept per tenant for the live answer
	guardSamples     = 60             // a guardrail's samples in memory, for its reports
	autoReportGap    = time.Minute    // between a guardrail's own reports
	maxTopRows       = 1000
	stopWait         = 10 * time.Second // a stop waits for its report that long
)

// Config is what the surface needs.
type Config struct {
	StateDir string // reports go to STATE/observe; "" a temporary folder removed at Close
	Logger   *slog.Logger
}

// Surface is the /v1/sandbox/observe routes, and the observations they run.
type Surface struct {
	core    *call.Core
	dir     string
	tempDir bool
	log     *slog.Logger
	ctx     context.Context // ends at Close: the samplers stop
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex
	tenants map[string]*tenantState // guarded by mu
	running int                     // guarded by mu
	closed  bool                    // guarded by mu
}

// tenantState is one tenant's observation state.
type tenantState struct {
	run     *observation
	mark    cpuMark  // the last reading's CPU times
	last    *float64 // the last reading's CPU percentage, for readings in quick succession
	events  []event  // the most recent, oldest first
	ended   map[string]string
	exports map[string]reportInfo // by idempotency key
}

// New makes the surface; Close stops its observations.
func New(core *call.Core, cfg Config) (*Surface, error) {
	s := &Surface{core: core, log: cfg.Logger, tenants: map[string]*tenantState{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if cfg.StateDir == "" {
		d, err := os.MkdirTemp("", "aiod-observe-")
		if err != nil {
			return nil, err
		}
		s.dir, s.tempDir = d, true
	} else {
		s.dir = filepath.Join(cfg.StateDir, "observe")
		if err := os.MkdirAll(s.dir, 0o700); err != nil {
			return nil, err
		}
		s.recoverRuns()
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Register adds the routes.
func (s *Surface) Register(r *router.Router) {
	const base = "/v1/sandbox/observe"
	r.GET(base+"/status", s.status)
	r.GET(base+"/live", s.live)
	r.POST(base+"/start", s.start)
	r.POST(base+"/stop", s.stop)
	r.POST(base+"/export", s.export)
	r.GET(base+"/reports", s.reports)
	r.GET(base+"/reports/{report_id}", s.download)
	r.DELETE(base+"/reports/{report_id}", s.deleteReport)
}

// Close stops every observation (each writes its report, reason
// "shutdown") and waits for them, bounded by ctx.
func (s *Surface) Close(ctx context.Context) {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.log.Warn("observations did not end before the stop's deadline")
	}
	if s.tempDir {
		_ = os.RemoveAll(s.dir)
	}
}

// tenant is tenant's state, made on first use; with mu held.
func (s *Surface) tenantLocked(tenant string) *tenantState {
	ts := s.tenants[tenant]
	if ts == nil {
		ts = &tenantState{ended: map[string]string{}, exports: map[string]reportInfo{}}
		s.tenants[tenant] = ts
	}
	return ts
}

// tenantDir is where tenant's reports and run files are: a folder named
// by a hash of its key (keys hold ':' and a subject's own characters).
func (s *Surface) tenantDir(tenant string) string {
	h := sha256.Sum256([]byte("tenant\x00" + tenant))
	return filepath.Join(s.dir, hex.EncodeToString(h[:10]))
}

// readNow takes one reading of tenant's sandbox now, with CPU figures
// over the time since its last reading (by any caller or sampler); a
// sampler's (perRuntime) reads each runtime's own usage too, for the
// guardrails.
func (s *Surface) readNow(tenant string, topRows int, withProcs, withDisk, perRuntime bool) liveSnapshot {
	var rts []jupyter.Runtime
	for _, ss := range s.core.Reg.List(tenant) {
		if rt := ss.Runtime(); rt != nil {
			rts = append(rts, rt)
		}
	}
	rd := s.core.RT.ReadSandbox(tenant, rts, perRuntime)
	s.mu.Lock()
	prev := s.tenantLocked(tenant).mark
	s.mu.Unlock()
	now := time.Now()
	snap, mark := read(rd, prev, now, topRows, withProcs, withDisk)
	s.mu.Lock()
	ts := s.tenantLocked(tenant)
	// Readings closer than a tenth of a second give no useful rate: the
	// last rate stands and the mark is kept.
	if !ts.mark.at.IsZero() && now.Sub(ts.mark.at) < 100*time.Millisecond && ts.mark.at.Before(now) {
		snap.Cgroup.CPUUsagePct = ts.last
	} else if now.After(ts.mark.at) {
		ts.mark, ts.last = mark, snap.Cgroup.CPUUsagePct
	}
	snap.Mode = "off"
	if ts.run != nil {
		snap.Mode = ts.run.Mode
	}
	snap.RecentEvents = append([]event{}, ts.events...)
	s.mu.Unlock()
	return snap
}

// noteLocked records ev among tenant's recent events; with mu held.
func (ts *tenantState) noteLocked(ev event) {
	ts.events = append(ts.events, ev)
	if n := len(ts.events) - recentEvents; n > 0 {
		ts.events = append(ts.events[:0], ts.events[n:]...)
	}
}

// newID is prefix and 12 random hex digits.
func newID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
