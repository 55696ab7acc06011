// Package v1 serves the agent_sandbox SDK's code, jupyter, nodejs and
// sandbox routes (docs/v1-compat.md) on the call core, as v2 runs them.
// The file routes are package fsplane's.
//
// Shapes follow the SDK's models: every JSON route answers an object (never
// 204), a failed validation answers FastAPI's 422 detail list, JSON null is
// "absent" for every optional field, and an empty body is {}. Limits are
// aiod's (docs/limits.md), not the original server's.
package v1

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/execution"
)

// Config is what the surface needs besides the core.
type Config struct {
	Version  string // aiod's, as /v1/sandbox reports it
	StateDir string // where hooks are kept; "" keeps them in memory
	Logger   *slog.Logger
}

// Surface is the v1 routes.
type Surface struct {
	core    *call.Core
	version string // aiod's, as /v1/sandbox reports it
	log     *slog.Logger
	hooks   *hooks  // hooks.go
	skills  *skills // skills.go

	mu   sync.Mutex                       // guards meta
	meta map[*stream.Session]*sessionMeta // what v1 knows of sessions it touched; see run.go

	pkgMu    sync.Mutex                    // guards pkgCache and tools, never held across a listing; see share
	pkgCache map[string]*shared[[]pkgInfo] // package listings by language, reused for pkgTTL
	tools    map[string]*shared[string]    // toolOutput's answers, kept for the daemon's life
}

// New makes the surface.
func New(core *call.Core, cfg Config) *Surface {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Surface{core: core, version: cfg.Version, log: cfg.Logger, hooks: loadHooks(cfg.StateDir), skills: loadSkills(cfg.StateDir),
		meta: map[*stream.Session]*sessionMeta{}, pkgCache: map[string]*shared[[]pkgInfo]{}, tools: map[string]*shared[string]{}}
}

// Register adds the v1 routes the agent_sandbox SDK calls.
func (v *Surface) Register(r *router.Router) {
	r.POST("/v1/code/execute", v.codeExecute)
	r.GET("/v1/code/info", v.codeInfo)

	r.POST("/v1/jupyter/execute", v.jupyterExecute)
	r.GET("/v1/jupyter/info", v.jupyterInfo)
	r.GET("/v1/jupyter/sessions", v.jupyterSessions)
	r.DELETE("/v1/jupyter/sessions", v.jupyterDeleteAll)
	r.DELETE("/v1/jupyter/sessions/{session_id}", v.jupyterDelete)
	r.POST("/v1/jupyter/sessions/create", v.jupyterCreate)

	r.POST("/v1/nodejs/execute", v.nodeExecute)
	r.GET("/v1/nodejs/info", v.nodeInfo)
	r.POST("/v1/nodejs/sessions", v.nodeCreate)
	r.GET("/v1/nodejs/sessions", v.nodeList)
	r.GET("/v1/nodejs/sessions/{session_id}", v.nodeGet)
	r.PATCH("/v1/nodejs/sessions/{session_id}", v.nodeUpdate)
	r.DELETE("/v1/nodejs/sessions/{session_id}", v.nodeDelete)

	r.GET("/v1/sandbox", v.sandbox)
	r.GET("/v1/sandbox/packages/python", v.pythonPackages)
	r.GET("/v1/sandbox/packages/nodejs", v.nodePackages)
	r.POST("/v1/sandbox/hooks", v.registerHook)
	r.GET("/v1/sandbox/hooks", v.listHooks)
	r.DELETE("/v1/sandbox/hooks/{name}", v.removeHook)

	r.POST("/v1/skills/register", v.registerSkills)
	r.GET("/v1/skills/metadatas", v.listSkills)
	r.DELETE("/v1/skills", v.clearSkills)
	r.DELETE("/v1/skills/{name}", v.deleteSkill)
	r.GET("/v1/skills/{name}/content", v.skillContent)
}

// decode parses a v1 JSON body; on failure it has answered the 422.
func readBody(ctx *fasthttp.RequestCtx) (*api.Fields, bool) {
	f, fe := api.Decode(ctx.PostBody())
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return nil, false
	}
	return f, true
}

// parseBody reads a v1 JSON body with parse; on failure it has answered the
// 422.
func parseBody[T any](ctx *fasthttp.RequestCtx, parse func(*api.Fields) (T, *api.FieldError)) (T, bool) {
	var c T
	f, ok := readBody(ctx)
	if !ok {
		return c, false
	}
	c, fe := parse(f)
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return c, false
	}
	return c, true
}

func bodyErr(field, typ, format string, args ...any) *api.FieldError {
	return &api.FieldError{In: "body", Field: field, Type: typ, Msg: fmt.Sprintf(format, args...)}
}

// timeout reads an optional integral timeout in seconds within 1..max.
// The SDK types it int; aiod's limits apply (default 30 s, max 900 s).
func (v *Surface) timeout(f *api.Fields) (time.Duration, *api.FieldError) {
	n, ok := f.Int("timeout")
	if err := f.Err(); err != nil {
		return 0, err
	}
	if !ok {
		return v.core.Cfg.DefaultTimeout, nil
	}
	max := int64(v.core.Cfg.MaxTimeout / time.Second)
	if n < 1 || n > max {
		return 0, bodyErr("timeout", "less_than_equal", "must be between 1 and %d seconds, got %d", max, n)
	}
	return time.Duration(n) * time.Second, nil
}

// sessionID reads an optional session id; "" when absent, null or empty.
func optSessionID(f *api.Fields, name string) (string, *api.FieldError) {
	p := f.OptStr(name)
	if err := f.Err(); err != nil {
		return "", err
	}
	if p == nil {
		return "", nil
	}
	return *p, call.ValidSessionID(name, *p)
}

// cwd reads an optional working directory. It must exist and be a folder
// in the caller's view (its tenant's, under tenant isolation); a relative
// path is taken from the runtimes' working directory.
func (v *Surface) cwd(ctx *fasthttp.RequestCtx, f *api.Fields) (string, *api.FieldError) {
	p := f.OptStr("cwd")
	if err := f.Err(); err != nil {
		return "", err
	}
	if p == nil || *p == "" {
		return "", nil
	}
	dir := *p
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(v.defaultCwd(), dir)
	}
	dir = filepath.Clean(dir)
	view, err := v.core.ViewOf(ctx)
	if err != nil {
		return "", bodyErr("cwd", "value_error", "cannot check %q: %v", *p, err)
	}
	st, err := view.Stat(dir)
	switch {
	case err != nil:
		return "", bodyErr("cwd", "value_error", "cannot use %q as the working directory: %v", *p, err)
	case !st.IsDir():
		return "", bodyErr("cwd", "value_error", "%q is not a directory", *p)
	}
	return dir, nil
}

// defaultCwd is where runtimes start when no cwd is given.
func (v *Surface) defaultCwd() string { return v.core.Workspace() }

// pathSessionID reads {session_id} from the path, answering 422 when invalid.
func pathSessionID(ctx *fasthttp.RequestCtx) (string, bool) {
	id, fe := api.PathParam(ctx, "session_id")
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return "", false
	}
	if fe := call.ValidSessionID("session_id", id); fe != nil || id == "" {
		if fe == nil {
			fe = &api.FieldError{Msg: "is required", Type: "missing"}
		}
		fe.In, fe.Field = "path", "session_id"
		api.InvalidV1(ctx, fe)
		return "", false
	}
	return id, true
}

// nullIfEmpty is v1's rendering of an empty stream: null (the page's second sample).
func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// errorTraceback is the first error output's traceback, or nil.
func firstTraceback(r *execution.Result) []string {
	e := r.FirstError()
	if e == nil {
		return nil
	}
	if e.Traceback == nil {
		return []string{}
	}
	return e.Traceback
}

// optID renders a result's session id: null for one-shot calls.
func optID(id string) *string {
	if id == "" {
		return nil
	}
	return &id
}

// answerResult writes an execute route's envelope: success is false when
// the code raised or timed out, as on v2 (the page's rule).
func answer(ctx *fasthttp.RequestCtx, res *execution.Result, msg string, data any) {
	if msg == "" {
		msg = res.Message()
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: res.Success(), Message: msg, Data: data})
}
