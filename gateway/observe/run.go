package observe

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aiod/aiod/gateway/api"
)

// observation is one running observation of a tenant.
type observation struct {
	ID           string    `json:"session_id"`
	Tenant       string    `json:"-"`
	Mode         string    `json:"mode"`
	Started      time.Time `json:"started_at"`
	Ends         time.Time `json:"-"` // zero: at stop (or maxDuration)
	Interval     float64   `json:"interval_seconds"`
	Procs        bool      `json:"include_processes"`
	Disk         bool      `json:"include_disk"`
	Key          string    `json:"-"` // its start's idempotency key
	runFile      string
	stopCh       chan struct{} // closed by a stop
	done         chan struct{} // closed once its report is written
	reportID     string        // its final report; "" if it could not be written
	stopReason   string
	written      int64 // bytes in runFile; guarded by Surface.mu
	dropped      int   // lines past maxRunBytes; guarded by Surface.mu
	lastSample   time.Time
	samples      []liveSnapshot // a guardrail's last ones; guarded by Surface.mu
	armed        map[string]bool
	lastOOM      int64
	lastThrottle int64
	lastAuto     time.Time
}

// line is one line of a run file or report.
type line struct {
	Type string `json:"type"` // "observation", "sample" or "event"
	Data any    `json:"data"`
}

// appendLocked writes v as a line of the run file, while it stays under
// maxRunBytes; with Surface.mu held (lines are whole before a reader
// takes the size).
func (o *observation) appendLocked(kind string, v any) {
	b, err := api.Marshal(line{Type: kind, Data: v})
	if err != nil {
		return
	}
	b = append(b, '\n')
	if o.written+int64(len(b)) > maxRunBytes {
		o.dropped++
		return
	}
	f, err := os.OpenFile(o.runFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		o.dropped++
		return
	}
	n, _ := f.Write(b)
	_ = f.Close()
	o.written += int64(n)
}

// sample runs o until its end: a reading at each interval, its events,
// and at the end its report.
func (s *Surface) sample(o *observation) {
	defer s.wg.Done()
	defer close(o.done)
	tick := time.NewTimer(s.spacing(o))
	defer tick.Stop()
	end := o.Ends
	if end.IsZero() {
		end = o.Started.Add(maxDuration)
	}
	limit := time.NewTimer(time.Until(end))
	defer limit.Stop()
	s.takeSample(o)
	reason := "stop"
loop:
	for {
		select {
		case <-tick.C:
			s.takeSample(o)
			tick.Reset(s.spacing(o))
		case <-limit.C:
			reason = "duration"
			break loop
		case <-o.stopCh:
			break loop
		case <-s.ctx.Done():
			reason = "shutdown"
			break loop
		}
	}
	info, err := s.writeReport(o.Tenant, o, reason)
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.tenantLocked(o.Tenant)
	if err != nil {
		s.log.Warn("observation report not written", "tenant", o.Tenant, "session", o.ID, "err", err)
	} else {
		o.reportID = info.ReportID
		ts.ended[o.ID] = info.ReportID
		if len(ts.ended) > maxReports {
			for id := range ts.ended {
				if id != o.ID {
					delete(ts.ended, id)
					break
				}
			}
		}
	}
	o.stopReason = reason
	_ = os.Remove(o.runFile)
	if ts.run == o {
		ts.run = nil
	}
	s.running--
}

// spacing is the time to o's next sample: its interval, or longer while
// so many observations run that all of them together would take more
// than samplesPerSecond.
func (s *Surface) spacing(o *observation) time.Duration {
	s.mu.Lock()
	n := s.running
	s.mu.Unlock()
	return max(time.Duration(o.Interval*float64(time.Second)), time.Duration(n)*time.Second/samplesPerSecond)
}

// takeSample reads o's sandbox once and records the sample (capture) and
// the events it trips.
func (s *Surface) takeSample(o *observation) {
	snap := s.readNow(o.Tenant, 20, o.Procs, o.Disk, true)
	snap.RecentEvents = nil
	s.mu.Lock()
	defer s.mu.Unlock()
	o.lastSample = snap.CapturedAt
	ts := s.tenantLocked(o.Tenant)
	if o.Mode == "capture" {
		o.appendLocked("sample", snap)
	} else {
		o.samples = append(o.samples, snap)
		if n := len(o.samples) - guardSamples; n > 0 {
			o.samples = append(o.samples[:0], o.samples[n:]...)
		}
	}
	var tripped []string
	for _, ev := range o.guard(snap) {
		ts.noteLocked(ev)
		o.appendLocked("event", ev)
		if ev.Type != "cpu_throttled" {
			tripped = append(tripped, ev.Type)
		}
	}
	if o.Mode == "guardrail" && len(tripped) > 0 && time.Since(o.lastAuto) >= autoReportGap {
		o.lastAuto = time.Now()
		reason := "guardrail:" + tripped[0]
		s.wg.Add(1)
		go func() { // a report of what led to it, written outside the lock
			defer s.wg.Done()
			if _, err := s.writeReport(o.Tenant, o, reason); err != nil {
				s.log.Warn("guardrail report not written", "tenant", o.Tenant, "session", o.ID, "err", err)
			}
		}()
	}
}

// guard compares a sample with the limits and o's last sample, and says
// which events it makes: a kill by the OOM killer, memory or processes at
// 90 % of their limit, a disk 95 % full (each once until it falls back
// under 80 %, 80 %, 90 %), and CPU throttling.
func (o *observation) guard(snap liveSnapshot) []event {
	var out []event
	now := snap.CapturedAt
	c := snap.Cgroup
	if c.OOMKill != nil {
		if d := *c.OOMKill - o.lastOOM; d > 0 && o.armed["oom_seen"] {
			out = append(out, event{TS: now, Type: "oom_kill", Message: fmt.Sprintf("the OOM killer ended %d process(es) of the sandbox", d),
				Data: map[string]any{"oom_kill": *c.OOMKill, "new": d}})
		}
		o.lastOOM = *c.OOMKill
		o.armed["oom_seen"] = true
	}
	level := func(name string, pct, trip, rearm float64, msg string, data map[string]any) {
		switch {
		case pct >= trip && !o.armed[name]:
			o.armed[name] = true
			out = append(out, event{TS: now, Type: name, Message: msg, Data: data})
		case pct < rearm:
			o.armed[name] = false
		}
	}
	if c.MemUsagePct != nil {
		level("memory_high", *c.MemUsagePct, 90, 80, fmt.Sprintf("the sandbox's memory at %.1f%% of its limit", *c.MemUsagePct),
			map[string]any{"scope": "sandbox", "mem_current_bytes": c.MemCurrentBytes, "mem_max_bytes": *c.MemMaxBytes})
	}
	// Each runtime against its own limits (--runtime-memory, --runtime-pids).
	for _, u := range snap.runtimes {
		id := strconv.Itoa(u.PID)
		if u.MemoryLimitBytes > 0 {
			pct := 100 * float64(u.MemoryBytes) / float64(u.MemoryLimitBytes)
			level("memory_high:"+id, pct, 90, 80, fmt.Sprintf("runtime pid %d's memory at %.1f%% of its limit", u.PID, pct),
				map[string]any{"scope": "runtime", "pid": u.PID, "mem_current_bytes": u.MemoryBytes, "mem_max_bytes": u.MemoryLimitBytes})
		}
		if u.PidsLimit > 0 {
			pct := 100 * float64(u.Pids) / float64(u.PidsLimit)
			level("pids_high:"+id, pct, 90, 80, fmt.Sprintf("runtime pid %d runs %d of its %d processes and threads", u.PID, u.Pids, u.PidsLimit),
				map[string]any{"scope": "runtime", "pid": u.PID, "pids_current": u.Pids, "pids_max": u.PidsLimit})
		}
	}
	if c.PidsMax != nil && *c.PidsMax > 0 {
		pct := 100 * float64(c.PidsCurrent) / float64(*c.PidsMax)
		level("pids_high", pct, 90, 80, fmt.Sprintf("%d of %d processes and threads", c.PidsCurrent, *c.PidsMax),
			map[string]any{"pids_current": c.PidsCurrent, "pids_max": *c.PidsMax})
	}
	for _, d := range snap.Disk {
		level("disk_high:"+d.Path, d.UsagePct, 95, 90, fmt.Sprintf("%s is %.1f%% full", d.Path, d.UsagePct),
			map[string]any{"path": d.Path, "free_bytes": d.FreeBytes})
	}
	for i := range out { // the kind without what it is about
		out[i].Type, _, _ = strings.Cut(out[i].Type, ":")
	}
	if c.CPUNrThrottled != nil {
		if d := *c.CPUNrThrottled - o.lastThrottle; d > 0 && o.lastThrottle > 0 {
			out = append(out, event{TS: now, Type: "cpu_throttled", Message: fmt.Sprintf("throttled in %d more CPU periods (--runtime-cpu-limit)", d),
				Data: map[string]any{"cpu_nr_throttled": *c.CPUNrThrottled}})
		}
		o.lastThrottle = *c.CPUNrThrottled
	}
	return out
}

// runSoFar is o's run file up to its last whole line.
func (s *Surface) runSoFar(o *observation) []byte {
	s.mu.Lock()
	n := o.written
	s.mu.Unlock()
	b, err := os.ReadFile(o.runFile)
	if err != nil {
		return nil
	}
	if int64(len(b)) > n {
		b = b[:n]
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[:i+1]
	}
	return nil
}

// runFileOf is where o's lines go.
func (s *Surface) runFileOf(tenant, id string) string {
	return filepath.Join(s.tenantDir(tenant), "run-"+id+".jsonl")
}
