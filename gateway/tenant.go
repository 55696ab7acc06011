package gateway

import (
	"github.com/aiod/aiod/stream/backend"
)

// TenantIsolation describes tenant isolation as the tenant tenant sees it
// ("" for the default tenant).
func (s *Server) TenantIsolation(tenant string) backend.TenantReport {
	return s.rt.TenantIsolation(tenant)
}
