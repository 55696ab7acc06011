package v2

import (
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
)

// Completion and inspection, from the session's own runtime (call.Ask):
//
//	POST /v2/code/complete {language, session_id, code, cursor_pos}
//	  -> {matches, cursor_start, cursor_end, metadata}
//	POST /v2/code/inspect  {language, session_id, code, cursor_pos, detail_level?}
//	  -> {found, data, metadata}

func (s *Surface) v2Complete(ctx *fasthttp.RequestCtx) { s.v2Ask(ctx, false) }
func (s *Surface) v2Inspect(ctx *fasthttp.RequestCtx)  { s.v2Ask(ctx, true) }

func (s *Surface) v2Ask(ctx *fasthttp.RequestCtx, inspect bool) {
	a, fe := call.ParseAsk(ctx.PostBody(), inspect)
	if fe != nil {
		api.Invalid(ctx, fe)
		return
	}
	a.Owner, a.Tenant = call.Owner(ctx), call.Tenant(ctx)
	v, ce := s.core.Ask(a)
	if ce != nil {
		ce.Write(ctx)
		return
	}
	api.OK(ctx, v)
}
