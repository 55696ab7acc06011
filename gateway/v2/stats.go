package v2

import (
	"fmt"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/stream/backend"
)

// sessionStats is GET /v2/code/sessions/{id}/stats's data: the session's
// runtime's use now. Runtime is false while it has none (before its
// first call, after an idle reclaim); the numbers are then 0.
type sessionStats struct {
	SessionID string `json:"session_id"`
	Language  string `json:"language"`
	Runtime   bool   `json:"runtime"`
	backend.RuntimeUsage
}

// GET /v2/code/sessions/{id}/stats[?language=]: CPU, memory and processes
// of one session's runtime, from its cgroup (or /proc), read at the call;
// /metrics keeps no series per session.
func (s *Surface) v2SessionStats(ctx *fasthttp.RequestCtx) {
	ss, id, ok := s.sessionsOf(ctx)
	if !ok {
		return
	}
	if len(ss) > 1 {
		langs := make([]string, len(ss))
		for i, sess := range ss {
			langs[i] = sess.Language
		}
		api.Fail(ctx, fasthttp.StatusConflict, fmt.Sprintf("session %q exists in %s: name one with ?language=", id, strings.Join(langs, " and ")))
		return
	}
	sess := ss[0]
	st := sessionStats{SessionID: id, Language: sess.Language}
	if u, ok := backend.UsageOf(sess.Runtime()); ok {
		st.Runtime, st.RuntimeUsage = true, u
	}
	api.OK(ctx, st)
}
