// Package jupyterapi serves the Jupyter kernels API: the routes `jupyter
// server --gateway-url` and @jupyterlab/services use (/api, kernelspecs,
// kernels, and each kernel's channels WebSocket), over the sessions of the
// call core.
package jupyterapi

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fasthttp/router"
	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/gateway/wsock"
	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend"
	"github.com/aiod/aiod/stream/execution"
)

// The Jupyter kernels API (the part `jupyter server --gateway-url` and
// @jupyterlab/services use). Every kernel is a session of the registry:
//
//   - a kernel started by POST /api/kernels is the session whose id is the
//     kernel id (a UUID), language "python" for Python kernelspecs; REST
//     drives it with {"session_id": KERNEL_ID, "language": "python"};
//   - every REST session that runs in a kernel is listed too, under a
//     kernel id of its own (its session id when that is already a UUID,
//     otherwise a UUID kept for the session's life) and with "session_id"
//     naming it, so a notebook can attach to the session an agent uses.
//
// Kernels are the tenant's, as sessions are: a caller lists and reaches
// only its own; another tenant's kernel id is 404.

// ChannelsRoute is the kernel channels WebSocket's route pattern.
const ChannelsRoute = "/api/kernels/{id}/channels"

// Surface is the Jupyter kernels API.
type Surface struct {
	core    *call.Core
	hub     *wsock.Hub
	version string // aiod's, as GET /api reports it
}

// New makes the surface; its sockets are hub's.
func New(core *call.Core, hub *wsock.Hub, version string) *Surface {
	return &Surface{core: core, hub: hub, version: version}
}

// Register adds the routes.
func (h *Surface) Register(r *router.Router) {
	r.GET("/api", h.jupyterRoot)
	r.GET("/api/kernelspecs", h.listKernelspecs)
	r.GET("/api/kernelspecs/{name}", h.getKernelspec)
	r.GET("/api/kernels", h.listKernels)
	r.POST("/api/kernels", h.startKernel)
	r.GET("/api/kernels/{id}", h.getKernel)
	r.DELETE("/api/kernels/{id}", h.deleteKernel)
	r.POST("/api/kernels/{id}/interrupt", h.interruptKernel)
	r.POST("/api/kernels/{id}/restart", h.restartKernel)
	r.GET(ChannelsRoute, h.kernelChannels)
}

// kernels returns tenant's kernel-backed named sessions, oldest first.
func (h *Surface) kernels(tenant string) []*stream.Session {
	var out []*stream.Session
	for _, s := range h.core.Reg.List(tenant) {
		if s.Backend.Name == backend.Kernel {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out
}

// kernel returns tenant's kernel-backed session whose kernel id is id, or
// nil.
func (h *Surface) kernel(tenant, id string) *stream.Session {
	if s := h.core.Reg.Kernel(tenant, id); s != nil && s.Backend.Name == backend.Kernel {
		return s
	}
	return nil
}

// KernelModel is Jupyter's kernel model plus the session it is (the
// answer of GET /api/kernels/{id}).
type KernelModel struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	LastActivity   string `json:"last_activity"`
	ExecutionState string `json:"execution_state"`
	Connections    int    `json:"connections"`
	SessionID      string `json:"session_id"` // aiod's session: drive it over REST with this id
	Language       string `json:"language"`
}

func (h *Surface) model(s *stream.Session) KernelModel {
	name := s.Backend.Spec
	if rt := s.Runtime(); rt != nil && rt.Info().Name != "" {
		name = rt.Info().Name
	}
	if name == "" && h.core.Env.PythonKernel != nil {
		name = h.core.Env.PythonKernel.Name
	}
	return KernelModel{
		ID: s.KernelID, Name: name, LastActivity: jupyter.FormatDate(s.LastUsed()), ExecutionState: s.State(),
		Connections: s.Attached(), SessionID: s.ID, Language: s.Language,
	}
}

// jcallFail answers a call's failure as a Jupyter API error, with its
// Retry-After; a refusal for resources (403) has the reason Jupyter front
// ends know, "Resource Limit".
func jcallFail(ctx *fasthttp.RequestCtx, ce *call.Error) {
	if ce.Retry > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(ce.Retry))
	}
	if ce.Status == fasthttp.StatusForbidden {
		jwriteJSON(ctx, ce.Status, map[string]any{"message": ce.Msg, "reason": "Resource Limit"})
		return
	}
	jfail(ctx, ce.Status, ce.Msg)
}

// jfail answers a Jupyter API error: {"message": …, "reason": …}.
func jfail(ctx *fasthttp.RequestCtx, status int, msg string) {
	jwriteJSON(ctx, status, map[string]any{"message": msg, "reason": fasthttp.StatusMessage(status)})
}

func jwriteJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := api.Marshal(v)
	if err != nil {
		status, b = fasthttp.StatusInternalServerError, []byte(`{"message":"encode response","reason":null}`)
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.Response.SetBodyRaw(b)
}

func (h *Surface) jupyterRoot(ctx *fasthttp.RequestCtx) {
	jwriteJSON(ctx, fasthttp.StatusOK, map[string]any{"version": h.version, "implementation": "aiod"})
}

type kernelspecView struct {
	Name      string            `json:"name"`
	Spec      json.RawMessage   `json:"spec"`
	Resources map[string]string `json:"resources"`
}

func jSpecView(k *backend.KernelInfo) kernelspecView {
	return kernelspecView{Name: k.Name, Spec: k.Spec, Resources: map[string]string{}}
}

func (h *Surface) listKernelspecs(ctx *fasthttp.RequestCtx) {
	env := h.core.Env
	specs := map[string]kernelspecView{}
	def := ""
	for i := range env.Kernels {
		specs[env.Kernels[i].Name] = jSpecView(&env.Kernels[i])
		if def == "" {
			def = env.Kernels[i].Name
		}
	}
	if env.PythonKernel != nil {
		def = env.PythonKernel.Name
	}
	jwriteJSON(ctx, fasthttp.StatusOK, map[string]any{"default": def, "kernelspecs": specs})
}

func (h *Surface) getKernelspec(ctx *fasthttp.RequestCtx) {
	name, fe := api.PathParam(ctx, "name")
	if fe != nil {
		jfail(ctx, fasthttp.StatusBadRequest, fe.Error())
		return
	}
	k := h.core.Env.Kernel(name)
	if k == nil {
		jfail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("kernelspec %q not found", name))
		return
	}
	jwriteJSON(ctx, fasthttp.StatusOK, jSpecView(k))
}

func (h *Surface) listKernels(ctx *fasthttp.RequestCtx) {
	out := []KernelModel{}
	for _, s := range h.kernels(call.Tenant(ctx)) {
		out = append(out, h.model(s))
	}
	jwriteJSON(ctx, fasthttp.StatusOK, out)
}

func (h *Surface) kernelOr404(ctx *fasthttp.RequestCtx) *stream.Session {
	id, fe := api.PathParam(ctx, "id")
	if fe != nil {
		jfail(ctx, fasthttp.StatusBadRequest, fe.Error())
		return nil
	}
	e := h.kernel(call.Tenant(ctx), id)
	if e == nil {
		jfail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("kernel %s not found", id))
	}
	return e
}

func (h *Surface) getKernel(ctx *fasthttp.RequestCtx) {
	if e := h.kernelOr404(ctx); e != nil {
		jwriteJSON(ctx, fasthttp.StatusOK, h.model(e))
	}
}

// startKernel is POST /api/kernels {"name": SPEC, "env": {…}}: a new session
// whose id is the new kernel's id, its kernel started before the answer.
func (h *Surface) startKernel(ctx *fasthttp.RequestCtx) {
	var req struct {
		Name string            `json:"name"`
		Env  map[string]string `json:"env"`
	}
	if b := ctx.PostBody(); len(strings.TrimSpace(string(b))) > 0 {
		if err := json.Unmarshal(b, &req); err != nil {
			jfail(ctx, fasthttp.StatusBadRequest, "body must be a JSON object like {\"name\": \"python3\"}: "+err.Error())
			return
		}
	}
	var spec *backend.KernelInfo
	if req.Name == "" {
		spec = h.core.Env.PythonKernel
		if spec == nil && len(h.core.Env.Kernels) > 0 {
			spec = &h.core.Env.Kernels[0]
		}
	} else {
		spec = h.core.Env.Kernel(req.Name)
	}
	if spec == nil {
		msg := fmt.Sprintf("no kernelspec %q: see GET /api/kernelspecs", req.Name)
		if req.Name == "" {
			msg = "no Jupyter kernelspec was found; " + backend.IPyKernelHint
		}
		jfail(ctx, fasthttp.StatusNotFound, msg)
		return
	}
	id := jupyter.NewID()
	lang := strings.ToLower(spec.Language)
	if lang == "" {
		lang = "python"
	}
	tenant := call.Tenant(ctx)
	sess, _, ce := h.core.OpenSession(call.Call{Language: lang, KernelSpec: spec.Name, Env: jEnv(req.Env),
		SessionID: id, Owner: call.Owner(ctx), Tenant: tenant})
	if ce != nil {
		if ce.Kind == execution.KindAdmission {
			// Jupyter front ends and Enterprise Gateway clients know a
			// start refused for resources as 403 "Resource Limit".
			ce = &call.Error{Status: fasthttp.StatusForbidden, Msg: ce.Msg, Retry: ce.Retry, Kind: ce.Kind}
		}
		jcallFail(ctx, ce)
		return
	}
	sctx, cancel := context.WithTimeout(h.core.Ctx(), h.core.Cfg.KernelStartTimeout)
	defer cancel()
	if _, err := sess.EnsureRuntime(sctx); err != nil {
		dctx, dcancel := context.WithTimeout(h.core.Ctx(), 10*time.Second)
		h.core.Reg.DeleteSession(dctx, sess)
		dcancel()
		ce := call.MapError(err, call.Call{SessionID: id})
		jcallFail(ctx, &call.Error{Status: fasthttp.StatusServiceUnavailable, Msg: err.Error(), Retry: ce.Retry})
		return
	}
	if h.kernel(tenant, sess.KernelID) == nil {
		jfail(ctx, fasthttp.StatusConflict, "the kernel was shut down while it started")
		return
	}
	ctx.Response.Header.Set("Location", "/api/kernels/"+sess.KernelID)
	jwriteJSON(ctx, fasthttp.StatusCreated, h.model(sess))
}

// jEnv is the env of a kernel start request as KEY=VALUE entries, sorted;
// keys that cannot be variable names are left out.
func jEnv(env map[string]string) []string {
	extra := make([]string, 0, len(env))
	for k, v := range env {
		if k != "" && !strings.ContainsAny(k, "=\x00") {
			extra = append(extra, k+"="+v)
		}
	}
	sort.Strings(extra)
	return extra
}

func (h *Surface) deleteKernel(ctx *fasthttp.RequestCtx) {
	e := h.kernelOr404(ctx)
	if e == nil {
		return
	}
	dctx, cancel := context.WithTimeout(h.core.Ctx(), 30*time.Second)
	defer cancel()
	h.core.Reg.DeleteSession(dctx, e)
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

func (h *Surface) interruptKernel(ctx *fasthttp.RequestCtx) {
	e := h.kernelOr404(ctx)
	if e == nil {
		return
	}
	ictx, cancel := context.WithTimeout(h.core.Ctx(), 10*time.Second)
	defer cancel()
	if err := e.Interrupt(ictx, "a client (Jupyter API interrupt)"); err != nil {
		jfail(ctx, fasthttp.StatusServiceUnavailable, err.Error())
		return
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

func (h *Surface) restartKernel(ctx *fasthttp.RequestCtx) {
	e := h.kernelOr404(ctx)
	if e == nil {
		return
	}
	rctx, cancel := context.WithTimeout(h.core.Ctx(), h.core.Cfg.KernelStartTimeout+10*time.Second)
	defer cancel()
	if _, err := e.Restart(rctx, "a client (Jupyter API restart)"); err != nil {
		status := fasthttp.StatusServiceUnavailable
		if errors.Is(err, stream.ErrSessionClosed) {
			status = fasthttp.StatusNotFound
		}
		jfail(ctx, status, "restart kernel: "+err.Error())
		return
	}
	jwriteJSON(ctx, fasthttp.StatusOK, h.model(e))
}
