package gateway

import (
	"github.com/aiod/aiod/gateway/guard"
	"github.com/aiod/aiod/stream/backend"
	"github.com/valyala/fasthttp"
)

// tenantOf is the tenant of the request's caller: the JWT subject, the
// token, or "default" without credentials.
func tenantOf(ctx *fasthttp.RequestCtx) string {
	c := guard.CallerOf(ctx)
	switch c.Method {
	case "jwt", "token":
		return c.Key()
	}
	return "default"
}

// TenantIsolation describes tenant isolation as the tenant tenant sees it
// ("" for the default tenant).
func (s *Server) TenantIsolation(tenant string) backend.TenantReport {
	return s.rt.TenantIsolation(tenant)
}
