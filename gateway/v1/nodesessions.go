package v1

import (
	"fmt"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend"
	"github.com/aiod/aiod/stream/execution"
)

// The Node.js sessions routes. A session is the registry's
// ("javascript", id); v1 adds its cwd and max_idle_time (sessionMeta).

// nodeSessionInfo is NodeJsSessionInfo: times and max_idle_time in ms.
type nodeSessionInfo struct {
	SessionID   string  `json:"session_id"`
	Cwd         string  `json:"cwd"`
	CreatedAt   float64 `json:"created_at"`
	LastUsed    float64 `json:"last_used"`
	MaxIdleTime int64   `json:"max_idle_time"`
	AgeSeconds  int64   `json:"age_seconds"` // since last activity
	State       string  `json:"state"`       // IDLE or EXECUTING
}

func millis(t time.Time) float64 { return float64(t.UnixMicro()) / 1e3 }

func (v *Surface) nodeInfoOf(sess *stream.Session) nodeSessionInfo {
	m := v.metaOf(sess)
	idle := sess.Backend.Idle
	if m.maxIdle > 0 {
		idle = m.maxIdle
	}
	cwd := sess.Cwd()
	if cwd == "" {
		cwd = v.defaultCwd()
	}
	state := "IDLE"
	if sess.Busy() {
		state = "EXECUTING"
	}
	last := sess.LastUsed()
	return nodeSessionInfo{
		SessionID: sess.ID, Cwd: cwd, CreatedAt: millis(sess.Created), LastUsed: millis(last),
		MaxIdleTime: idle.Milliseconds(), AgeSeconds: int64(time.Since(last) / time.Second), State: state,
	}
}

// maxIdle reads max_idle_time (seconds, 60..86400). The value in force is
// capped at aiod's native idle time; note says so when it was.
func (v *Surface) maxIdle(f *api.Fields) (d time.Duration, note string, fe *api.FieldError) {
	n, ok := f.Int("max_idle_time")
	if err := f.Err(); err != nil {
		return 0, "", err
	}
	if !ok {
		return 0, "", nil
	}
	if n < 60 || n > 86400 {
		return 0, "", bodyErr("max_idle_time", "less_than_equal", "must be between 60 and 86400 seconds, got %d", n)
	}
	d = time.Duration(n) * time.Second
	if d > v.core.Cfg.NativeIdle {
		note = fmt.Sprintf("max_idle_time %d s is above aiod's native session idle limit; %d s is in force",
			n, int(v.core.Cfg.NativeIdle/time.Second))
		d = v.core.Cfg.NativeIdle
	}
	return d, note, nil
}

func (v *Surface) nodeCreate(ctx *fasthttp.RequestCtx) {
	f, ok := readBody(ctx)
	if !ok {
		return
	}
	note, fe := v.checkVersion("query", queryVersion(ctx))
	c := execReq{}
	c.Language = "javascript"
	var idleNote string
	if fe == nil {
		if c.SessionID, fe = optSessionID(f, "session_id"); fe == nil {
			if c.Cwd, fe = v.cwd(ctx, f); fe == nil {
				c.Idle, idleNote, fe = v.maxIdle(f)
			}
		}
	}
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	if c.SessionID == "" {
		c.SessionID = jupyter.NewID()
	}
	c.Owner, c.Tenant = call.Owner(ctx), call.Tenant(ctx)
	sess, created, ce := v.open(c)
	if ce != nil {
		ce.Write(ctx)
		return
	}
	msg := fmt.Sprintf("session %s created", sess.ID)
	if !created {
		msg = fmt.Sprintf("session %s already exists; it is unchanged", sess.ID)
	}
	for _, n := range []string{idleNote, note} {
		if n != "" {
			msg += "; " + n
		}
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: msg, Data: map[string]any{
		"session_id": sess.ID, "created": created, "message": msg, "session": v.nodeInfoOf(sess),
	}})
}

func (v *Surface) nodeList(ctx *fasthttp.RequestCtx) {
	if _, fe := v.checkVersion("query", queryVersion(ctx)); fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	out := map[string]nodeSessionInfo{}
	for _, sess := range v.sessionsOf(call.Tenant(ctx), "javascript", anyBackend) {
		out[sess.ID] = v.nodeInfoOf(sess)
	}
	api.OK(ctx, map[string]any{"sessions": out})
}

// nodeSession answers the path's session, or 404 (or 422) and nil.
func (v *Surface) nodeSession(ctx *fasthttp.RequestCtx) *stream.Session {
	id, ok := pathSessionID(ctx)
	if !ok {
		return nil
	}
	if _, fe := v.checkVersion("query", queryVersion(ctx)); fe != nil {
		api.InvalidV1(ctx, fe)
		return nil
	}
	sess := v.core.Reg.Get(call.Tenant(ctx), "javascript", id)
	if sess == nil {
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("Node.js session %q not found", id))
	}
	return sess
}

func (v *Surface) nodeGet(ctx *fasthttp.RequestCtx) {
	if sess := v.nodeSession(ctx); sess != nil {
		api.OK(ctx, map[string]any{"session": v.nodeInfoOf(sess)})
	}
}

// nodeUpdate changes a session's working folder (at once, through the
// session's own queue) and its max_idle_time. The idle time in force can be
// lowered, not raised above what the session was created with.
func (v *Surface) nodeUpdate(ctx *fasthttp.RequestCtx) {
	f, ok := readBody(ctx)
	if !ok {
		return
	}
	idle, idleNote, fe := v.maxIdle(f)
	var cwd string
	if fe == nil {
		cwd, fe = v.cwd(ctx, f)
	}
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	sess := v.nodeSession(ctx)
	if sess == nil {
		return
	}
	var notes []string
	if idleNote != "" {
		notes = append(notes, idleNote)
	}
	if idle > 0 {
		if idle > sess.Backend.Idle {
			notes = append(notes, fmt.Sprintf("max_idle_time cannot be raised above the %d s the session was created with",
				int(sess.Backend.Idle/time.Second)))
			idle = sess.Backend.Idle
		}
		v.setMeta(sess, func(m *sessionMeta) { m.maxIdle = idle })
		sess.SetIdle(idle) // the registry's reaper enforces it
	}
	if cwd != "" {
		res, err := sess.Execute(v.core.Ctx(), stream.ExecRequest{Code: backend.ChdirCode("javascript", cwd), Timeout: v.core.Cfg.DefaultTimeout})
		if ce := call.MapError(err, call.Call{SessionID: sess.ID}); ce != nil {
			ce.Write(ctx)
			return
		}
		if res.Status != execution.StatusOK {
			api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: false,
				Message: fmt.Sprintf("cannot change the working directory to %q: %s", cwd, res.Message())})
			return
		}
		sess.SetCwd(cwd)
	}
	msg := "session updated"
	if len(notes) > 0 {
		msg += "; " + strings.Join(notes, "; ")
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: msg, Data: map[string]any{
		"updated": idle > 0 || cwd != "", "session": v.nodeInfoOf(sess),
	}})
}

func (v *Surface) nodeDelete(ctx *fasthttp.RequestCtx) {
	sess := v.nodeSession(ctx)
	if sess == nil {
		return
	}
	v.deleteSession(v.core.Ctx(), sess.Tenant, "javascript", sess.ID)
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true,
		Message: fmt.Sprintf("session %s deleted", sess.ID), Data: map[string]any{"deleted": true}})
}
