package gateway

import "github.com/fasthttp/router"

// registerWeb serves the browser notebook page (package web) at /.
func (s *Server) registerWeb(r *router.Router) {}
