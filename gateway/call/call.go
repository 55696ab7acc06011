// Package call is the core every surface of the gateway runs on: one
// execution request (Call), whichever route it came from, the one path
// that runs it (Core.Execute), and the one mapping of every failure to an
// answer (Error). Surfaces (v2, v1, the WebSocket, the Jupyter kernels API,
// MCP) parse their own requests, hand a Call to the Core and say its
// Result or Error in their protocol.
package call

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/guard"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend"
	"github.com/aiod/aiod/stream/execution"
)

// Call is one validated execution request.
type Call struct {
	Language   string
	Code       string
	SessionID  string // "" is a one-shot call in a temporary session
	Timeout    time.Duration
	Kernel     bool          // Python must run in a kernel (the /v1/jupyter routes)
	KernelSpec string        // a kernelspec other than the default; "" the default
	Cwd        string        // run in this folder; "" where the runtime already is
	Idle       time.Duration // idle limit of a session this call creates; 0 the backend's
	Env        []string      // extra environment (KEY=VALUE) of a runtime this call starts; its runtime is not a pooled one
	// ExecutionID is the caller's id of the execution; "" gets one made. A
	// known id attaches to that execution instead of running the code again.
	ExecutionID string
	Origin      any    // who started it (a WebSocket); its events carry it
	Owner       string // the caller key a session this call creates counts against (Owner); "" none
	Tenant      string // whose names SessionID and ExecutionID are (Tenant)
	Subs        []execution.Subscriber
	Warnings    []string // about the request (fields ignored); copied into the result
	// OnCreate is called with the session when this call creates it.
	OnCreate func(*stream.Session)

	adm *admitted // the session Admit took for it, or nil
}

// Error is a failure to run at all, with its HTTP status: every surface
// says it in its protocol (an envelope, a WebSocket error message, an MCP
// tool error, a Jupyter reason).
type Error struct {
	Status int
	Msg    string
	Kind   string // data.error_kind: execution.KindAdmission, execution.KindStart, or ""
	Retry  int    // seconds for Retry-After; 0 sends none
}

func (e *Error) Error() string { return e.Msg }

// Write answers e as an envelope route does: data null, or, for a refusal
// with a kind, {"error_kind", "retry_after"} (and the Retry-After header).
func (e *Error) Write(ctx *fasthttp.RequestCtx) {
	if e.Retry > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(e.Retry))
	}
	if e.Kind == "" {
		api.Fail(ctx, e.Status, e.Msg)
		return
	}
	api.WriteJSON(ctx, e.Status, api.Envelope{Success: false, Message: e.Msg, Data: e.Data()})
}

// ErrorData is the data of a refusal that has a kind.
type ErrorData struct {
	ErrorKind  string `json:"error_kind"`
	RetryAfter int    `json:"retry_after,omitempty"`
}

// Data is the envelope's data for e: nil without a kind.
func (e *Error) Data() *ErrorData {
	if e.Kind == "" {
		return nil
	}
	return &ErrorData{ErrorKind: e.Kind, RetryAfter: e.Retry}
}

// ErrorOf is the answer to an execution's stored failure to run (what
// Record.Fail was given): the *Error itself when a surface stored one,
// else its mapping.
func ErrorOf(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return MapError(err, Call{})
}

// Owner is the caller key sessions created by the request count against
// (--max-sessions-per-key): the JWT subject or the token; "" when no
// credentials are required.
func Owner(ctx *fasthttp.RequestCtx) string {
	c := guard.CallerOf(ctx)
	if c.Method == "" || c.Method == "none" {
		return ""
	}
	return c.Key()
}

// Tenant is the tenant the request's names belong to (guard's
// Caller.Tenant): its sessions, executions and kernels are the only ones
// the request can name or list.
func Tenant(ctx *fasthttp.RequestCtx) string { return guard.CallerOf(ctx).Tenant() }

// MapError maps a failure to run c to its answer: 503 when nothing can run
// it (no interpreter, a start that failed, shutdown), 429 or 503 when an
// admission limit refused it, 409 when its session was deleted before it
// ran. It is the one mapping every surface uses.
func MapError(err error, c Call) *Error {
	var ni *backend.ErrNoInterpreter
	var se *stream.StartError
	var le *stream.LimitError
	var e *Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &e):
		return e
	case errors.As(err, &le):
		return &Error{Status: limitStatus(le), Msg: le.Msg, Kind: execution.KindAdmission, Retry: le.RetrySeconds()}
	case errors.As(err, &ni):
		return &Error{Status: fasthttp.StatusServiceUnavailable, Msg: ni.Msg, Kind: execution.KindStart}
	case errors.As(err, &se):
		return &Error{Status: fasthttp.StatusServiceUnavailable, Msg: se.Error(), Kind: execution.KindStart}
	case errors.Is(err, stream.ErrShuttingDown), errors.Is(err, context.Canceled):
		return &Error{Status: fasthttp.StatusServiceUnavailable, Msg: stream.ErrShuttingDown.Error()}
	case errors.Is(err, stream.ErrSessionClosed) && c.SessionID == "":
		return &Error{Status: fasthttp.StatusServiceUnavailable, Msg: stream.ErrShuttingDown.Error()}
	case errors.Is(err, stream.ErrSessionClosed):
		return &Error{Status: fasthttp.StatusConflict, Msg: fmt.Sprintf("session %q was deleted before this call ran", c.SessionID)}
	}
	return &Error{Status: fasthttp.StatusServiceUnavailable, Msg: err.Error()}
}

// limitStatus is an admission refusal's HTTP status: 429 for a session
// cap (the caller has too much), 503 for the start queue (aiod is busy).
func limitStatus(le *stream.LimitError) int {
	if le.Busy() {
		return fasthttp.StatusServiceUnavailable
	}
	return fasthttp.StatusTooManyRequests
}
