package gateway

import "github.com/fasthttp/router"

// registerV1 adds the v1 routes the agent_sandbox SDK calls.
func (s *Server) registerV1(r *router.Router) {}
