package v2

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/execution"
)

// The execution routes (durable executions): every execution has an id,
// which its tenant can fetch, wait for, stream from any point, or
// interrupt (another tenant's id is unknown, 404); sessions can be
// interrupted and restarted over REST.
//
//	GET  /v2/code/executions/{id}[?wait=S]    state; when done, the execute answer
//	GET  /v2/code/executions/{id}/events      SSE or NDJSON from the start, Last-Event-ID or ?after=SEQ
//	POST /v2/code/executions/{id}/interrupt   interrupt it (running) or drop it (queued)
//	POST /v2/code/sessions/{id}/interrupt     interrupt what the session runs
//	POST /v2/code/sessions/{id}/restart       replace the session's runtime (state lost)

// execState is data of GET /v2/code/executions/{id} while not done.
type execState struct {
	ExecutionID string     `json:"execution_id"`
	State       string     `json:"state"`
	SessionID   *string    `json:"session_id"`
	Language    string     `json:"language"`
	CreatedAt   time.Time  `json:"created_at"`
	StartedAt   *time.Time `json:"started_at"`
	QueuedMs    int64      `json:"queued_ms"`
	LastSeq     int        `json:"last_seq"` // the seq of the last output so far: resume with after=this
	// Outputs are the outputs so far (the execution log's: the last
	// --output-budget bytes of them), a list in every state, as the done
	// answer's: a client that iterates it never meets null.
	Outputs []any `json:"outputs"`
}

// execDone is data of GET /v2/code/executions/{id} once done: exactly the
// execute route's data, the state, and the output count a running one
// has (so that every field keeps one type whatever the state).
type execDone struct {
	call.ExecData
	State   string `json:"state"`
	LastSeq int    `json:"last_seq"`
}

var _ api.Appender = execDone{}

// JSONSize and AppendJSON write execDone as api.Marshal does (api.Appender).
func (d execDone) JSONSize() int { return d.ExecData.JSONSize() + 64 }

func (d execDone) AppendJSON(dst []byte) ([]byte, error) {
	dst, err := d.ExecData.AppendJSON(dst)
	if err != nil {
		return nil, err
	}
	dst = execution.AppendJSONString(append(dst[:len(dst)-1], `,"state":`...), d.State) // the data's closing brace goes after these
	return append(strconv.AppendInt(append(dst, `,"last_seq":`...), int64(d.LastSeq), 10), '}'), nil
}

// record answers the caller's execution the path names, or 404 / 410.
func (s *Surface) record(ctx *fasthttp.RequestCtx) *execution.Record {
	id, fe := api.PathParam(ctx, "id")
	if fe != nil {
		api.Invalid(ctx, fe)
		return nil
	}
	rec, err := s.reg.Executions().Get(call.Tenant(ctx), id)
	var gone *execution.GoneError
	switch {
	case errors.As(err, &gone):
		api.Fail(ctx, fasthttp.StatusGone, gone.Error())
	case err != nil:
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("execution %q not found", id))
	}
	return rec
}

func (s *Surface) v2GetExecution(ctx *fasthttp.RequestCtx) {
	rec := s.record(ctx)
	if rec == nil {
		return
	}
	if w := ctx.QueryArgs().Peek("wait"); len(w) > 0 {
		secs, err := strconv.ParseFloat(string(w), 64)
		if err != nil || secs < 0 || secs > s.cfg.MaxTimeout.Seconds() {
			api.Invalid(ctx, &api.FieldError{In: "query", Field: "wait", Type: "less_than_equal",
				Msg: fmt.Sprintf("must be seconds from 0 to the max timeout %g, got %q", s.cfg.MaxTimeout.Seconds(), w)})
			return
		}
		wctx, cancel := context.WithTimeout(s.core.Ctx(), time.Duration(secs*float64(time.Second)))
		_, _, _ = rec.Wait(wctx)
		cancel()
	}
	s.answerExecution(ctx, rec)
}

// answerExecution answers an execution's state, or, once it is done, the
// answer its execute route gave.
func (s *Surface) answerExecution(ctx *fasthttp.RequestCtx, rec *execution.Record) {
	v := rec.View()
	switch {
	case v.Err != nil:
		call.ErrorOf(v.Err).Write(ctx)
	case v.State == execution.StateDone && v.Result != nil:
		d := execDone{ExecData: call.V2Data(v.Result), State: v.State, LastSeq: v.LastSeq}
		api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: v.Result.Success(), Message: v.Result.Message(), Data: d})
	default:
		st := execState{ExecutionID: v.ID, State: v.State, Language: v.Language, CreatedAt: v.Created.UTC(),
			QueuedMs: v.Queued.Milliseconds(), LastSeq: v.LastSeq, Outputs: []any{}}
		for _, o := range rec.Outputs() {
			st.Outputs = append(st.Outputs, o.Compact())
		}
		if v.SessionID != "" {
			st.SessionID = &v.SessionID
		}
		if !v.Started.IsZero() {
			t := v.Started.UTC()
			st.StartedAt = &t
		} else {
			st.QueuedMs = time.Since(v.Created).Milliseconds()
		}
		api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: v.State, Data: st})
	}
}

func (s *Surface) v2ExecutionEvents(ctx *fasthttp.RequestCtx) {
	rec := s.record(ctx)
	if rec == nil {
		return
	}
	after, fe := resumePoint(ctx)
	if fe != nil {
		api.Invalid(ctx, fe)
		return
	}
	s.streamExecution(ctx, rec, after, streamFormatOf(ctx, true))
}

// resumePoint reads where a stream resumes: ?after=SEQ, else the
// Last-Event-ID header, else 0 (from the start).
func resumePoint(ctx *fasthttp.RequestCtx) (int, *api.FieldError) {
	raw, in, field := ctx.QueryArgs().Peek("after"), "query", "after"
	if len(raw) == 0 {
		raw, in, field = ctx.Request.Header.Peek("Last-Event-ID"), "header", "Last-Event-ID"
	}
	if len(raw) == 0 {
		return 0, nil
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil || n < 0 {
		return 0, &api.FieldError{In: in, Field: field, Type: "int_parsing", Msg: fmt.Sprintf("must be an output seq (a whole number from 0), got %q", raw)}
	}
	return n, nil
}

func (s *Surface) v2InterruptExecution(ctx *fasthttp.RequestCtx) {
	rec := s.record(ctx)
	if rec == nil {
		return
	}
	v := rec.View()
	by := "a client (REST interrupt)"
	switch v.State {
	case execution.StateDone:
		api.Fail(ctx, fasthttp.StatusConflict, fmt.Sprintf("execution %s already finished; nothing to interrupt", v.ID))
		return
	case execution.StateQueued:
		if rec.Drop(by) {
			api.OK(ctx, map[string]any{"execution_id": v.ID, "interrupted": true, "state": execution.StateQueued,
				"note": "it was waiting behind the session's earlier calls and will not run"})
			return
		}
	}
	sess := rec.Runner()
	if sess == nil {
		s.answerExecution(ctx, rec) // it finished meanwhile
		return
	}
	ictx, cancel := context.WithTimeout(s.core.Ctx(), 10*time.Second)
	defer cancel()
	ran, err := sess.InterruptExecution(ictx, rec, by)
	switch {
	case err != nil:
		api.Fail(ctx, fasthttp.StatusServiceUnavailable, "interrupt: "+err.Error())
		return
	case !ran:
		s.answerExecution(ctx, rec) // it finished meanwhile
		return
	}
	api.OK(ctx, map[string]any{"execution_id": v.ID, "interrupted": true, "state": execution.StateRunning})
}

// sessionsOf answers the caller's sessions of the path's id, of the
// language the body or query names, or all languages; 404 when there are
// none.
func (s *Surface) sessionsOf(ctx *fasthttp.RequestCtx) ([]*stream.Session, string, bool) {
	id, fe := api.PathParam(ctx, "id")
	if fe != nil {
		api.Invalid(ctx, fe)
		return nil, id, false
	}
	lang := string(ctx.QueryArgs().Peek("language"))
	if b := ctx.PostBody(); len(b) > 0 && lang == "" {
		f, fe := api.Decode(b)
		if fe != nil {
			api.Invalid(ctx, fe)
			return nil, id, false
		}
		if l := f.OptStr("language"); l != nil {
			lang = *l
		}
		if fe := f.Err(); fe != nil {
			api.Invalid(ctx, fe)
			return nil, id, false
		}
	}
	if lang != "" && !call.KnownLanguage(lang) {
		api.Invalid(ctx, call.LanguageError("body", "language", lang))
		return nil, id, false
	}
	out := s.core.Sessions(call.Tenant(ctx), lang, id)
	if len(out) == 0 {
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("session %q not found", id))
		return nil, id, false
	}
	return out, id, true
}

func (s *Surface) v2InterruptSession(ctx *fasthttp.RequestCtx) {
	ss, id, ok := s.sessionsOf(ctx)
	if !ok {
		return
	}
	var interrupted []string
	for _, sess := range ss {
		running, _ := sess.Activity()
		if running == nil {
			continue
		}
		ictx, cancel := context.WithTimeout(s.core.Ctx(), 10*time.Second)
		err := sess.Interrupt(ictx, "a client (REST session interrupt)")
		cancel()
		if err != nil {
			api.Fail(ctx, fasthttp.StatusServiceUnavailable, fmt.Sprintf("interrupt the %s session %q: %v", sess.Language, id, err))
			return
		}
		interrupted = append(interrupted, running.ID)
	}
	msg := fmt.Sprintf("%d execution(s) interrupted", len(interrupted))
	if len(interrupted) == 0 {
		msg = "nothing was running"
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: msg,
		Data: map[string]any{"session_id": id, "interrupted": append([]string{}, interrupted...)}})
}

func (s *Surface) v2RestartSession(ctx *fasthttp.RequestCtx) {
	ss, id, ok := s.sessionsOf(ctx)
	if !ok {
		return
	}
	var langs []string
	for _, sess := range ss {
		rctx, cancel := context.WithTimeout(s.core.Ctx(), s.cfg.KernelStartTimeout+10*time.Second)
		_, err := sess.Restart(rctx, "a client (REST restart)")
		cancel()
		if err != nil {
			api.Fail(ctx, call.MapError(err, call.Call{SessionID: id}).Status, fmt.Sprintf("restart the %s session %q: %v", sess.Language, id, err))
			return
		}
		langs = append(langs, sess.Language)
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true,
		Message: fmt.Sprintf("session %q restarted: its runtime is fresh and its earlier state is gone", id),
		Data:    map[string]any{"session_id": id, "restarted": langs, "fresh_runtime": true}})
}
