package gateway

import (
	"context"
	"errors"
	"fmt"
	"github.com/aiod/aiod/stream/execution"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/guard"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend"
)

// execCall is one validated execution request, whichever route it came
// from: v2 REST, the v1 routes, or the WebSocket. Server.execute runs it.
type execCall struct {
	Language   string
	Code       string
	SessionID  string // "" is a one-shot call in a temporary session
	Timeout    time.Duration
	Kernel     bool          // Python must run in a kernel (the /v1/jupyter routes)
	KernelSpec string        // a kernelspec other than the default; "" the default
	Cwd        string        // run in this folder; "" where the runtime already is
	Idle       time.Duration // idle limit of a session this call creates; 0 the backend's
	// ExecutionID is the caller's id of the execution; "" gets one made. A
	// known id attaches to that execution instead of running the code again.
	ExecutionID string
	Origin      any    // who started it (a WebSocket); its events carry it
	Owner       string // the caller key a session this call creates counts against (ownerOf); "" none
	Tenant      string // whose names SessionID and ExecutionID are (tenantOf)
	Subs        []execution.Subscriber
	Warnings    []string // about the request (fields ignored); copied into the result
	// OnCreate is called with the session when this call creates it.
	OnCreate func(*stream.Session)
}

// callError is a failure to run at all, with its HTTP status.
type callError struct {
	Status int
	Msg    string
	Kind   string // data.error_kind: execution.KindAdmission, execution.KindStart, or ""
	Retry  int    // seconds for Retry-After; 0 sends none
}

// write answers ce as an envelope route does: data null, or, for a
// refusal with a kind, {"error_kind", "retry_after"} (and the Retry-After
// header).
func (ce *callError) write(ctx *fasthttp.RequestCtx) {
	if ce.Retry > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(ce.Retry))
	}
	if ce.Kind == "" {
		api.Fail(ctx, ce.Status, ce.Msg)
		return
	}
	api.WriteJSON(ctx, ce.Status, api.Envelope{Success: false, Message: ce.Msg, Data: ce.data()})
}

// errorData is the data of a refusal that has a kind.
type errorData struct {
	ErrorKind  string `json:"error_kind"`
	RetryAfter int    `json:"retry_after,omitempty"`
}

func (ce *callError) data() *errorData {
	if ce.Kind == "" {
		return nil
	}
	return &errorData{ErrorKind: ce.Kind, RetryAfter: ce.Retry}
}

// runError is ce as the stored failure of an execution that could not
// run; callErrorOf turns it back.
func (ce *callError) runError() *execution.RunError {
	return &execution.RunError{Status: ce.Status, Msg: ce.Msg, Kind: ce.Kind, Retry: ce.Retry}
}

// callErrorOf is the answer to a stored failure (see runError).
func callErrorOf(re *execution.RunError) *callError {
	return &callError{Status: re.Status, Msg: re.Msg, Kind: re.Kind, Retry: re.Retry}
}

// ownerOf is the caller key sessions created by the request count against
// (--max-sessions-per-key): the JWT subject or the token; "" when no
// credentials are required.
func ownerOf(ctx *fasthttp.RequestCtx) string {
	c := guard.CallerOf(ctx)
	if c.Method == "" || c.Method == "none" {
		return ""
	}
	return c.Key()
}

// tenantOf is the tenant the request's names belong to (guard's
// Caller.Tenant): its sessions, executions and kernels are the only ones
// the request can name or list.
func tenantOf(ctx *fasthttp.RequestCtx) string { return guard.CallerOf(ctx).Tenant() }

// execute runs c: in a temporary runtime, or in the named session created
// on first use. It is the one run path; every route maps its errors the
// same way (runError). A call whose execution id names an execution already
// queued, running or done does not run the code again: it answers that
// execution's result (Replayed when it had finished before the call).
func (s *Server) execute(ctx context.Context, c execCall) (*execution.Result, *callError) {
	rec, created, ce := s.claim(c)
	if ce != nil {
		return nil, ce
	}
	if !created {
		return s.attach(ctx, rec)
	}
	return s.runClaimed(ctx, c, rec)
}

// claim records c's execution in the store; created is false when its id
// names one that exists.
func (s *Server) claim(c execCall) (*execution.Record, bool, *callError) {
	rec, created, err := s.reg.Executions().Claim(c.Tenant, c.ExecutionID, execution.Key{Language: c.Language, SessionID: c.SessionID, Code: c.Code})
	var gone *execution.GoneError
	switch {
	case errors.Is(err, execution.ErrExecutionConflict):
		return nil, false, &callError{Status: fasthttp.StatusConflict, Msg: fmt.Sprintf("execution_id %q: %v; choose another id", c.ExecutionID, err)}
	case errors.As(err, &gone):
		return nil, false, &callError{Status: fasthttp.StatusGone, Msg: gone.Error()}
	case err != nil:
		return nil, false, &callError{Status: fasthttp.StatusServiceUnavailable, Msg: err.Error()}
	}
	return rec, created, nil
}

// attach waits for an execution another call started and answers its
// result.
func (s *Server) attach(ctx context.Context, rec *execution.Record) (*execution.Result, *callError) {
	finished := false
	select {
	case <-rec.Done():
		finished = true
	default:
	}
	res, rerr, err := rec.Wait(ctx)
	switch {
	case err != nil:
		return nil, runError(err, execCall{})
	case rerr != nil:
		return nil, callErrorOf(rerr)
	}
	cp := *res
	cp.Replayed = finished
	return &cp, nil
}

// runClaimed runs c, whose execution rec this call claimed; when it cannot
// run, rec says why too.
func (s *Server) runClaimed(ctx context.Context, c execCall, rec *execution.Record) (*execution.Result, *callError) {
	res, ce := s.run(ctx, c, rec)
	switch {
	case ce != nil:
		rec.Fail(ce.runError())
	case res.ExecutionID != rec.ID:
		// Another execution answered for this one (a folder change that
		// failed before the code could run).
		res.ExecutionID = rec.ID
		rec.Deliver(execution.Event{ExecutionID: rec.ID, Result: res})
	}
	return res, ce
}

func (s *Server) run(ctx context.Context, c execCall, rec *execution.Record) (*execution.Result, *callError) {
	req := stream.ExecRequest{Code: c.Code, Timeout: c.Timeout, Origin: c.Origin, Subs: c.Subs, Record: rec, Warnings: c.Warnings}
	if c.SessionID == "" {
		b, err := s.backendOf(c)
		if err != nil {
			return nil, runError(err, c)
		}
		sess, err := s.reg.TempFor(c.Owner, c.Tenant, b)
		if err != nil {
			return nil, runError(err, c)
		}
		defer s.reg.Release(sess)
		res, err := sess.Execute(ctx, req)
		return res, runError(err, c)
	}
	sess, created, ce := s.openSession(c)
	if ce != nil {
		return nil, ce
	}
	if !created && c.Cwd != "" && sess.Cwd() != c.Cwd {
		// The session's runtime already runs elsewhere: change folder in
		// the session's own order (a visible execution of its own).
		pre, err := sess.Execute(ctx, stream.ExecRequest{Code: backend.ChdirCode(c.Language, c.Cwd), Timeout: c.Timeout})
		if err != nil {
			return nil, runError(err, c)
		}
		if pre.Status != execution.StatusOK {
			pre.Code = c.Code
			pre.Notes = append([]string{fmt.Sprintf("cannot change the working directory to %q; the code did not run", c.Cwd)}, pre.Notes...)
			return pre, nil
		}
		sess.SetCwd(c.Cwd)
	}
	res, err := sess.Execute(ctx, req)
	return res, runError(err, c)
}

// backendOf is how c's code runs.
func (s *Server) backendOf(c execCall) (stream.Backend, error) {
	return s.rt.For(backend.Want{Language: c.Language, Kernel: c.Kernel, KernelSpec: c.KernelSpec, Cwd: c.Cwd, Idle: c.Idle, Tenant: c.Tenant})
}

// openSession returns the session of c, creating it (and calling
// c.OnCreate) when it does not exist. A call that needs a kernel on a
// session without one is a conflict.
func (s *Server) openSession(c execCall) (*stream.Session, bool, *callError) {
	b, err := s.backendOf(c)
	if err != nil {
		return nil, false, runError(err, c)
	}
	sess, created, err := s.reg.OpenFor(c.Owner, c.Tenant, c.Language, c.SessionID, b)
	if err != nil {
		return nil, false, runError(err, c)
	}
	if !created && c.Kernel && sess.Backend.Name == backend.Native {
		return nil, false, &callError{Status: fasthttp.StatusConflict, Msg: fmt.Sprintf(
			"session %q is a native Python REPL session (AIO_CODE_BACKEND=native), and /v1/jupyter needs a kernel: use another session_id, or delete this one first", c.SessionID)}
	}
	if created && c.OnCreate != nil {
		c.OnCreate(sess)
	}
	return sess, created, nil
}

// runError maps a failure to run c to its answer: 503 when nothing can run
// it (no interpreter, a start that failed, shutdown), 409 when its session
// was deleted before it ran.
func runError(err error, c execCall) *callError {
	var ni *backend.ErrNoInterpreter
	var se *stream.StartError
	var le *stream.LimitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &le):
		return &callError{Status: le.Status, Msg: le.Msg, Kind: execution.KindAdmission, Retry: le.RetrySeconds()}
	case errors.As(err, &ni):
		return &callError{Status: fasthttp.StatusServiceUnavailable, Msg: ni.Msg, Kind: execution.KindStart}
	case errors.As(err, &se):
		return &callError{Status: fasthttp.StatusServiceUnavailable, Msg: se.Error(), Kind: execution.KindStart}
	case errors.Is(err, stream.ErrShuttingDown), errors.Is(err, context.Canceled):
		return &callError{Status: fasthttp.StatusServiceUnavailable, Msg: stream.ErrShuttingDown.Error()}
	case errors.Is(err, stream.ErrSessionClosed) && c.SessionID == "":
		return &callError{Status: fasthttp.StatusServiceUnavailable, Msg: stream.ErrShuttingDown.Error()}
	case errors.Is(err, stream.ErrSessionClosed):
		return &callError{Status: fasthttp.StatusConflict, Msg: fmt.Sprintf("session %q was deleted before this call ran", c.SessionID)}
	}
	return &callError{Status: fasthttp.StatusServiceUnavailable, Msg: err.Error()}
}
