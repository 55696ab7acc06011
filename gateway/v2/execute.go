package v2

import (
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
)

// POST /v2/code/execute: the original contract (docs/v2-contract.md). The
// call is parsed and run on the core; a client that asks for a stream
// (Accept: text/event-stream or application/x-ndjson) gets the execution's
// entries as they come (sse.go).
func (s *Surface) v2Execute(ctx *fasthttp.RequestCtx) {
	c, fe := s.core.ParseExecute(ctx.PostBody())
	if fe != nil {
		api.Invalid(ctx, fe)
		return
	}
	c.Owner, c.Tenant = call.Owner(ctx), call.Tenant(ctx)
	if f := streamFormatOf(ctx, false); f != noStream {
		s.v2ExecuteStream(ctx, c, f)
		return
	}
	res, ce := s.core.Execute(s.core.Ctx(), c)
	if ce != nil {
		ce.Write(ctx)
		return
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: res.Success(), Message: res.Message(), Data: call.V2Data(res)})
}

// v2ExecuteStream answers POST /v2/code/execute as a stream (Accept:
// text/event-stream or application/x-ndjson). The execution runs on its
// own, on the core: a client that goes away stops only its stream, and
// GET /v2/code/executions/{id}/events resumes it.
func (s *Surface) v2ExecuteStream(ctx *fasthttp.RequestCtx, c call.Call, f streamFormat) {
	if _, err := s.core.Backend(c); err != nil {
		call.MapError(err, c).Write(ctx)
		return
	}
	rec, created, ce := s.core.Claim(c)
	if ce != nil {
		ce.Write(ctx)
		return
	}
	if created {
		// A refusal by the session caps is an HTTP answer (429 and
		// Retry-After), not an error event in a 200 stream.
		if ce := s.core.Admit(&c); ce != nil {
			rec.Fail(ce)
			ce.Write(ctx)
			return
		}
		s.core.Start(c, rec, nil)
	}
	s.streamExecution(ctx, rec, 0, f)
}
