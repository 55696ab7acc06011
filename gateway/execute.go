package gateway

import (
	"fmt"
	"github.com/aiod/aiod/stream/execution"
	"math"
	"time"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/stream"
	"github.com/valyala/fasthttp"
)

// codeLanguages are the languages of the code routes.
var codeLanguages = map[string]bool{"python": true, "javascript": true}

// parseTimeout reads an optional timeout in seconds within (0, max].
func (s *Server) parseTimeout(f *api.Fields, name string) (time.Duration, *api.FieldError) {
	v, ok := f.Float(name)
	if err := f.Err(); err != nil {
		return 0, err
	}
	if !ok {
		return s.cfg.DefaultTimeout, nil
	}
	max := s.cfg.MaxTimeout.Seconds()
	if v <= 0 || v > max || math.IsNaN(v) {
		return 0, &api.FieldError{In: "body", Field: name, Type: "less_than_equal",
			Msg: fmt.Sprintf("must be more than 0 and at most %g seconds, got %g", max, v)}
	}
	return time.Duration(v * float64(time.Second)), nil
}

// validSessionID accepts ids that survive a URL path unescaped.
func validSessionID(name, id string) *api.FieldError {
	if len(id) > 128 {
		return &api.FieldError{In: "body", Field: name, Msg: "must be at most 128 characters", Type: "string_too_long"}
	}
	for _, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':' || c == '@'
		if !ok {
			return &api.FieldError{In: "body", Field: name, Type: "string_pattern_mismatch",
				Msg: fmt.Sprintf("may hold only letters, digits and - _ . : @ (got %q)", id)}
		}
	}
	return nil
}

// parseV2Execute validates POST /v2/code/execute (and a WebSocket execute
// message, whose own keys are named in known). Types are strict; fields it
// does not know are ignored with a warning in the call's result.
func (s *Server) parseV2Execute(body []byte, known ...string) (execCall, *api.FieldError) {
	f, fe := api.DecodeStrict(body)
	if fe != nil {
		return execCall{}, fe
	}
	f.Known(known...)
	c := execCall{Language: f.Str("language", true), Code: f.Str("code", true)}
	if sid := f.OptStr("session_id"); sid != nil {
		c.SessionID = *sid
	}
	eid := f.OptStr("execution_id")
	if err := f.Err(); err != nil {
		return c, err
	}
	if eid != nil {
		if *eid == "" {
			return c, &api.FieldError{In: "body", Field: "execution_id", Type: "string_too_short", Msg: "must be 1 to 128 characters; leave it out to get one made"}
		}
		if err := validSessionID("execution_id", *eid); err != nil {
			return c, err
		}
		c.ExecutionID = *eid
	}
	if !codeLanguages[c.Language] {
		return c, &api.FieldError{In: "body", Field: "language", Type: "literal_error",
			Msg: fmt.Sprintf("unsupported language %q: use python or javascript", c.Language)}
	}
	if err := validSessionID("session_id", c.SessionID); err != nil {
		return c, err
	}
	t, err := s.parseTimeout(f, "timeout")
	c.Timeout = t
	if err != nil {
		return c, err
	}
	c.Warnings = unknownWarnings(f)
	if len(c.Warnings) > 0 {
		s.log.Debug("request fields ignored", "route", "/v2/code/execute", "warnings", c.Warnings)
	}
	return c, nil
}

// unknownWarnings says, for each field of a request that was not read, that
// it was ignored: a misspelt session_id must not pass unnoticed.
func unknownWarnings(f *api.Fields) []string {
	var out []string
	for _, name := range f.Unknown() {
		out = append(out, fmt.Sprintf("unknown field %q ignored", name))
	}
	return out
}

// v2ExecData is data of POST /v2/code/execute.
type v2ExecData struct {
	Code           string   `json:"code"`
	Language       string   `json:"language"`
	Status         string   `json:"status"`
	ExecutionCount *int     `json:"execution_count"`
	ExitCode       int      `json:"exit_code"`
	Outputs        []any    `json:"outputs"`
	Stdout         string   `json:"stdout"`
	Stderr         string   `json:"stderr"`
	SessionID      *string  `json:"session_id"`
	ExecutionID    string   `json:"execution_id"`
	QueuedMs       int64    `json:"queued_ms,omitempty"` // time spent behind the session's earlier calls
	Truncated      bool     `json:"truncated,omitempty"`
	FreshRuntime   bool     `json:"fresh_runtime,omitempty"`
	Replayed       bool     `json:"replayed,omitempty"` // the stored answer of an execution that had finished
	NextInput      *string  `json:"next_input,omitempty"`
	ErrorKind      string   `json:"error_kind,omitempty"`
	Warnings       []string `json:"warnings,omitempty"`
}

// V2Data renders a result as POST /v2/code/execute's data: stream text
// without ANSI codes (Result.Plain), as every REST answer has it.
func V2Data(r *execution.Result) any { return v2Data(r.Plain()) }

// v2Data renders r as it is: the WebSocket's result keeps the colours of
// its live outputs.
func v2Data(r *execution.Result) v2ExecData {
	d := v2ExecData{
		Code: r.Code, Language: r.Language, Status: r.Status, ExecutionCount: r.ExecutionCount,
		ExitCode: r.ExitCode(), Outputs: make([]any, len(r.Outputs)),
		Stdout: r.Text("stdout"), Stderr: r.Text("stderr"),
		Truncated: r.Truncated, FreshRuntime: r.Fresh, Warnings: r.Warnings, ExecutionID: r.ExecutionID,
		QueuedMs: r.Queued.Milliseconds(), Replayed: r.Replayed, ErrorKind: r.ErrorKind,
	}
	if r.NextInput != "" {
		d.NextInput = &r.NextInput
	}
	for i, o := range r.Outputs {
		d.Outputs[i] = o.Compact()
	}
	if r.SessionID != "" {
		d.SessionID = &r.SessionID
	}
	return d
}

func (s *Server) v2Execute(ctx *fasthttp.RequestCtx) {
	c, fe := s.parseV2Execute(ctx.PostBody())
	if fe != nil {
		api.Invalid(ctx, fe)
		return
	}
	c.Owner, c.Tenant = ownerOf(ctx), tenantOf(ctx)
	if f := streamFormatOf(ctx, false); f != noStream {
		s.v2ExecuteStream(ctx, c, f)
		return
	}
	res, ce := s.execute(s.reqCtx(), c)
	if ce != nil {
		ce.write(ctx)
		return
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: res.Success(), Message: res.Message(), Data: V2Data(res)})
}

// v2ExecuteStream answers POST /v2/code/execute as a stream (Accept:
// text/event-stream or application/x-ndjson). The execution runs on its
// own, tracked for shutdown: a client that goes away stops only its
// stream, and GET /v2/code/executions/{id}/events resumes it.
func (s *Server) v2ExecuteStream(ctx *fasthttp.RequestCtx, c execCall, f streamFormat) {
	if _, err := s.backendOf(c); err != nil {
		ce := runError(err, c)
		ce.write(ctx)
		return
	}
	rec, created, ce := s.claim(c)
	if ce != nil {
		ce.write(ctx)
		return
	}
	if created {
		run := s.live.goExec(func() { _, _ = s.runClaimed(s.live.ctx, c, rec) })
		if !run {
			rec.Fail(runError(stream.ErrShuttingDown, c).runError())
		}
	}
	s.streamExecution(ctx, rec, 0, f)
}
