package gateway

import (
	"fmt"
	"time"

	"github.com/aiod/aiod/gateway/api"
	"github.com/valyala/fasthttp"
)

// sessionView is one session in listings.
type sessionView struct {
	SessionID   string    `json:"session_id"`
	Language    string    `json:"language"`
	Backend     string    `json:"backend"`
	Busy        bool      `json:"busy"`
	Running     bool      `json:"running"` // a runtime process is up
	PID         int       `json:"pid,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	LastUsed    time.Time `json:"last_used"`
	IdleSeconds float64   `json:"idle_seconds"`
	Watchers    int       `json:"watchers"`
	Executing   *execRef  `json:"executing"`    // the execution running now, or null
	Queued      []execRef `json:"queued"`       // executions waiting behind it, oldest first
	QueueLength int       `json:"queue_length"` // len(queued)
}

func (s *Server) v2ListSessions(ctx *fasthttp.RequestCtx) {
	api.OK(ctx, map[string]any{"sessions": s.sessionViews(tenantOf(ctx))})
}

// sessionViews lists tenant's named sessions (GET /v2/code/sessions, MCP's
// list_sessions).
func (s *Server) sessionViews(tenant string) []sessionView {
	out := []sessionView{}
	for _, ss := range s.reg.List(tenant) {
		v := sessionView{
			SessionID: ss.ID, Language: ss.Language, Backend: ss.Backend.Name, Busy: ss.Busy(),
			CreatedAt: ss.Created.UTC(), LastUsed: ss.LastUsed().UTC(),
			IdleSeconds: time.Since(ss.LastUsed()).Seconds(), Watchers: ss.Mux().Watchers(),
		}
		if rt := ss.Runtime(); rt != nil {
			v.Running, v.PID = true, rt.Info().PID
		}
		running, queued := ss.Activity()
		if running != nil {
			r := refOf(*running)
			v.Executing = &r
		}
		v.Queued = []execRef{}
		for _, q := range queued {
			v.Queued = append(v.Queued, refOf(q))
		}
		v.QueueLength = len(v.Queued)
		out = append(out, v)
	}
	return out
}

func (s *Server) v2DeleteSession(ctx *fasthttp.RequestCtx) {
	id, fe := api.PathParam(ctx, "id")
	if fe != nil {
		api.Invalid(ctx, fe)
		return
	}
	n := s.reg.Delete(s.reqCtx(), tenantOf(ctx), id)
	if n == 0 {
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("session %q not found", id))
		return
	}
	api.OK(ctx, map[string]any{"session_id": id, "closed": n})
}
