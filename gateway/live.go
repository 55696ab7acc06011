package gateway

import "github.com/fasthttp/router"

// registerLive adds the WebSocket routes and the Jupyter kernels API.
func (s *Server) registerLive(r *router.Router) {}
