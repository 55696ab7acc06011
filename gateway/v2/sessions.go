package v2

import (
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
)

func (s *Surface) v2ListSessions(ctx *fasthttp.RequestCtx) {
	tenant := call.Tenant(ctx)
	api.OK(ctx, map[string]any{"sessions": append(s.core.SessionViews(tenant), s.savedViews(tenant)...)})
}

func (s *Surface) v2DeleteSession(ctx *fasthttp.RequestCtx) {
	id, fe := api.PathParam(ctx, "id")
	if fe != nil {
		api.Invalid(ctx, fe)
		return
	}
	n := s.reg.Delete(s.core.Ctx(), call.Tenant(ctx), id)
	if n == 0 {
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("session %q not found", id))
		return
	}
	api.OK(ctx, map[string]any{"session_id": id, "closed": n})
}
