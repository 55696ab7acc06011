package observe

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
)

// Answers are the reference's envelopes; 404 an unknown observation or
// report, 409 a second observation of a tenant, 429 past maxRunning, 422
// naming the field.

type statusData struct {
	Mode        string     `json:"mode"`
	Running     bool       `json:"running"`
	SessionID   *string    `json:"session_id"`
	StartedAt   *time.Time `json:"started_at"`
	EndsAt      *time.Time `json:"ends_at"`
	Interval    *float64   `json:"interval_seconds"`
	LastSample  *time.Time `json:"last_sample_at"`
	RuntimeDir  *string    `json:"runtime_dir"`
	ReportCount int        `json:"report_count"`
}

type startResult struct {
	SessionID  string     `json:"session_id"`
	Mode       string     `json:"mode"`
	StartedAt  time.Time  `json:"started_at"`
	EndsAt     *time.Time `json:"ends_at"`
	Interval   float64    `json:"interval_seconds"`
	RuntimeDir string     `json:"runtime_dir"`
}

type stopResult struct {
	SessionID   string `json:"session_id"`
	Stopped     bool   `json:"stopped"`
	ReportReady bool   `json:"report_ready"`
}

// runtimeDir is o's folder as the answers name it: relative to aiod's
// state directory, out of the tenant's reach.
func (s *Surface) runtimeDir(o *observation) string {
	rel, _ := filepath.Rel(filepath.Dir(s.dir), filepath.Dir(o.runFile))
	return rel
}

func (s *Surface) startOf(o *observation) startResult {
	r := startResult{SessionID: o.ID, Mode: o.Mode, StartedAt: o.Started.UTC(), Interval: o.Interval, RuntimeDir: s.runtimeDir(o)}
	if !o.Ends.IsZero() {
		e := o.Ends.UTC()
		r.EndsAt = &e
	}
	return r
}

// GET /v1/sandbox/observe/status
func (s *Surface) status(ctx *fasthttp.RequestCtx) {
	tenant := call.Tenant(ctx)
	st := statusData{Mode: "off", ReportCount: len(listReports(s.tenantDir(tenant)))}
	s.mu.Lock()
	if o := s.tenantLocked(tenant).run; o != nil {
		r := s.startOf(o)
		st.Mode, st.Running, st.SessionID, st.StartedAt, st.EndsAt, st.Interval, st.RuntimeDir =
			o.Mode, true, &r.SessionID, &r.StartedAt, r.EndsAt, &r.Interval, &r.RuntimeDir
		if !o.lastSample.IsZero() {
			ls := o.lastSample
			st.LastSample = &ls
		}
	}
	s.mu.Unlock()
	api.OK(ctx, st)
}

// GET /v1/sandbox/observe/live[?top_rows=10]
func (s *Surface) live(ctx *fasthttp.RequestCtx) {
	rows := 10
	if q := ctx.QueryArgs().Peek("top_rows"); len(q) > 0 {
		n, err := strconv.Atoi(string(q))
		if err != nil || n < 0 || n > maxTopRows {
			api.InvalidV1(ctx, &api.FieldError{In: "query", Field: "top_rows", Type: "int_parsing",
				Msg: fmt.Sprintf("must be an integer from 0 to %d, got %q", maxTopRows, q)})
			return
		}
		rows = n
	}
	api.OK(ctx, s.readNow(call.Tenant(ctx), rows, true, true, false))
}

// POST /v1/sandbox/observe/start
func (s *Surface) start(ctx *fasthttp.RequestCtx) {
	f, fe := api.Decode(ctx.PostBody())
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	o := &observation{Mode: "capture", Interval: defaultInterval.Seconds(), Procs: true, Disk: true, armed: map[string]bool{}}
	if m := f.OptStr("mode"); m != nil {
		o.Mode = *m
	}
	if k := f.OptStr("idempotency_key"); k != nil {
		o.Key = *k
	}
	dur, hasDur := f.Int("duration_seconds")
	if v, ok := f.Float("interval_seconds"); ok {
		o.Interval = v
	}
	o.Procs = f.Bool("include_processes", true)
	o.Disk = f.Bool("include_disk", true)
	bad := func(field, typ, format string, args ...any) {
		api.InvalidV1(ctx, &api.FieldError{In: "body", Field: field, Type: typ, Msg: fmt.Sprintf(format, args...)})
	}
	switch {
	case f.Err() != nil:
		api.InvalidV1(ctx, f.Err())
		return
	case o.Mode != "capture" && o.Mode != "guardrail":
		bad("mode", "enum", "must be 'guardrail' or 'capture', got %q", o.Mode)
		return
	case len(o.Key) > 128:
		bad("idempotency_key", "string_too_long", "is %d characters; at most 128", len(o.Key))
		return
	case hasDur && (dur < 1 || dur > int64(maxDuration/time.Second)):
		bad("duration_seconds", "less_than_equal", "must be from 1 to %d seconds, got %d", int64(maxDuration/time.Second), dur)
		return
	case o.Interval < minInterval.Seconds() || o.Interval > maxInterval.Seconds():
		bad("interval_seconds", "greater_than_equal", "must be from %g to %g seconds, got %g", minInterval.Seconds(), maxInterval.Seconds(), o.Interval)
		return
	}
	tenant := call.Tenant(ctx)
	s.mu.Lock()
	ts := s.tenantLocked(tenant)
	switch {
	case ts.run != nil && o.Key != "" && ts.run.Key == o.Key:
		r := s.startOf(ts.run)
		s.mu.Unlock()
		api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: "observation already started with this idempotency_key", Data: r})
		return
	case ts.run != nil:
		id := ts.run.ID
		s.mu.Unlock()
		api.Fail(ctx, fasthttp.StatusConflict, fmt.Sprintf("observation %s is running: one at a time a sandbox; stop it first (POST /v1/sandbox/observe/stop)", id))
		return
	case s.closed:
		s.mu.Unlock()
		api.Fail(ctx, fasthttp.StatusServiceUnavailable, "aiod is shutting down")
		return
	case s.running >= maxRunning:
		s.mu.Unlock()
		api.Fail(ctx, fasthttp.StatusTooManyRequests, fmt.Sprintf("%d observations are running on this aiod, its limit; try again when one ends", maxRunning))
		return
	}
	o.ID, o.Tenant, o.Started = newID("obs-"), tenant, time.Now()
	if hasDur {
		o.Ends = o.Started.Add(time.Duration(dur) * time.Second)
	}
	o.runFile = s.runFileOf(tenant, o.ID)
	o.stopCh, o.done = make(chan struct{}), make(chan struct{})
	if err := os.MkdirAll(filepath.Dir(o.runFile), 0o700); err != nil {
		s.mu.Unlock()
		api.Fail(ctx, fasthttp.StatusInternalServerError, "make the observation's folder: "+err.Error())
		return
	}
	ts.run = o
	s.running++
	s.wg.Add(1)
	o.appendLocked("start", s.startOf(o))
	s.mu.Unlock()
	go s.sample(o)
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: "observation started", Data: s.startOf(o)})
}

// POST /v1/sandbox/observe/stop
func (s *Surface) stop(ctx *fasthttp.RequestCtx) {
	f, fe := api.Decode(ctx.PostBody())
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	want := f.OptStr("session_id")
	if fe := f.Err(); fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	tenant := call.Tenant(ctx)
	s.mu.Lock()
	ts := s.tenantLocked(tenant)
	o := ts.run
	if o == nil || (want != nil && *want != o.ID) {
		rep, ended := "", false
		if want != nil {
			rep, ended = ts.ended[*want]
		}
		s.mu.Unlock()
		switch {
		case ended:
			api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: "observation " + *want + " had ended; its report is " + rep,
				Data: stopResult{SessionID: *want, ReportReady: true}})
		case want != nil:
			api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("no observation %s of this sandbox is running or ended lately", *want))
		default:
			api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: "no observation is running", Data: stopResult{}})
		}
		return
	}
	select {
	case <-o.stopCh:
	default:
		close(o.stopCh)
	}
	s.mu.Unlock()
	t := time.NewTimer(stopWait)
	defer t.Stop()
	select {
	case <-o.done:
	case <-t.C:
		api.Fail(ctx, fasthttp.StatusServiceUnavailable, fmt.Sprintf("observation %s is stopping but its report was not written within %s", o.ID, stopWait))
		return
	}
	s.mu.Lock()
	rep := o.reportID
	s.mu.Unlock()
	msg := "observation stopped; report " + rep
	if rep == "" {
		msg = "observation stopped; its report could not be written (see aiod's log)"
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: msg, Data: stopResult{SessionID: o.ID, Stopped: true, ReportReady: rep != ""}})
}

// POST /v1/sandbox/observe/export
func (s *Surface) export(ctx *fasthttp.RequestCtx) {
	f, fe := api.Decode(ctx.PostBody())
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	key, want, reason := f.OptStr("idempotency_key"), f.OptStr("session_id"), "manual"
	if r := f.OptStr("reason"); r != nil {
		reason = *r
	}
	switch {
	case f.Err() != nil:
		api.InvalidV1(ctx, f.Err())
		return
	case key != nil && len(*key) > 128:
		api.InvalidV1(ctx, &api.FieldError{In: "body", Field: "idempotency_key", Type: "string_too_long", Msg: fmt.Sprintf("is %d characters; at most 128", len(*key))})
		return
	case len(reason) > 256:
		api.InvalidV1(ctx, &api.FieldError{In: "body", Field: "reason", Type: "string_too_long", Msg: fmt.Sprintf("is %d characters; at most 256", len(reason))})
		return
	}
	tenant := call.Tenant(ctx)
	s.mu.Lock()
	ts := s.tenantLocked(tenant)
	if key != nil {
		if info, ok := ts.exports[*key]; ok {
			s.mu.Unlock()
			if _, still := s.reportOf(tenant, info.ReportID); still {
				api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: "exported already with this idempotency_key", Data: info})
				return
			}
			s.mu.Lock()
		}
	}
	o := ts.run
	var ended string
	if want != nil && (o == nil || o.ID != *want) {
		o, ended = nil, ts.ended[*want]
		if ended == "" {
			s.mu.Unlock()
			api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("no observation %s of this sandbox is running or ended lately", *want))
			return
		}
	}
	s.mu.Unlock()
	if ended != "" {
		if info, ok := s.reportOf(tenant, ended); ok {
			api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: "observation " + *want + " has ended: its report", Data: info})
			return
		}
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("observation %s has ended and its report is gone", *want))
		return
	}
	info, err := s.writeReport(tenant, o, reason)
	if err != nil {
		api.Fail(ctx, fasthttp.StatusInternalServerError, "write the report: "+err.Error())
		return
	}
	if key != nil {
		s.mu.Lock()
		if len(ts.exports) >= maxReports {
			clear(ts.exports)
		}
		ts.exports[*key] = info
		s.mu.Unlock()
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: "report " + info.ReportID + " written", Data: info})
}

// GET /v1/sandbox/observe/reports
func (s *Surface) reports(ctx *fasthttp.RequestCtx) {
	api.OK(ctx, listReports(s.tenantDir(call.Tenant(ctx))))
}

// report reads the report_id path parameter and finds it among the
// caller's reports; false when it has answered.
func (s *Surface) report(ctx *fasthttp.RequestCtx) (string, reportInfo, bool) {
	id, fe := api.PathParam(ctx, "report_id")
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return "", reportInfo{}, false
	}
	tenant := call.Tenant(ctx)
	info, ok := s.reportOf(tenant, id)
	if !ok {
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("no report %q (GET /v1/sandbox/observe/reports lists this sandbox's)", id))
		return "", reportInfo{}, false
	}
	return tenant, info, true
}

// GET /v1/sandbox/observe/reports/{report_id}: the gzip'd JSON lines.
func (s *Surface) download(ctx *fasthttp.RequestCtx) {
	tenant, info, ok := s.report(ctx)
	if !ok {
		return
	}
	f, err := os.Open(filepath.Join(s.tenantDir(tenant), info.ReportID+".jsonl.gz"))
	if err != nil {
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("report %s is gone", info.ReportID))
		return
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		api.Fail(ctx, fasthttp.StatusInternalServerError, err.Error())
		return
	}
	ctx.SetContentType("application/gzip")
	ctx.Response.Header.Set("Content-Disposition", `attachment; filename="`+info.ReportID+`.jsonl.gz"`)
	ctx.SetBodyStream(f, int(st.Size())) // fasthttp closes f
}

// DELETE /v1/sandbox/observe/reports/{report_id}
func (s *Surface) deleteReport(ctx *fasthttp.RequestCtx) {
	tenant, info, ok := s.report(ctx)
	if !ok {
		return
	}
	if err := removeReport(s.tenantDir(tenant), info.ReportID); err != nil {
		api.Fail(ctx, fasthttp.StatusInternalServerError, "remove the report: "+err.Error())
		return
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: "report " + info.ReportID + " deleted", Data: info})
}
