package gateway

import (
	"os"

	"github.com/aiod/aiod/gateway/fsplane"
	"github.com/aiod/aiod/stream/backend"
	"github.com/valyala/fasthttp"
)

// TenantIsolation describes tenant isolation as the tenant tenant sees it
// ("" for the default tenant).
func (s *Server) TenantIsolation(tenant string) backend.TenantReport {
	return s.rt.TenantIsolation(tenant)
}

// fsView is where the file plane acts for the request's caller: the
// tenant's view with its rights (its file helper), the --runtime-user's
// rights on the host, or the host with aiod's own (HostFS).
func (s *Server) fsView(ctx *fasthttp.RequestCtx) (fsplane.FS, error) {
	return s.viewOf(tenantOf(ctx))
}

// viewOf is fsView for a tenant.
func (s *Server) viewOf(tenant string) (fsplane.FS, error) {
	f, err := s.rt.Files(tenant)
	if err != nil {
		return nil, err
	}
	if f == nil {
		return s.hostFS, nil
	}
	return f, nil
}

// tempDir is the temporary folder runtimes see: the tenant's /tmp under
// tenant isolation, else aiod's own.
func (s *Server) tempDir() string {
	if s.rt.Tenanted() {
		return "/tmp"
	}
	return os.TempDir()
}
