package gateway

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend"
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

// kernels returns tenant's kernel-backed named sessions, oldest first.
func (h *liveHub) kernels(tenant string) []*stream.Session {
	var out []*stream.Session
	for _, s := range h.s.reg.List(tenant) {
		if s.Backend.Name == backend.Kernel {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out
}

// kernel returns tenant's kernel-backed session whose kernel id is id, or
// nil.
func (h *liveHub) kernel(tenant, id string) *stream.Session {
	if s := h.s.reg.Kernel(tenant, id); s != nil && s.Backend.Name == backend.Kernel {
		return s
	}
	return nil
}

// kernelModel is Jupyter's kernel model plus the session it is.
type kernelModel struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	LastActivity   string `json:"last_activity"`
	ExecutionState string `json:"execution_state"`
	Connections    int    `json:"connections"`
	SessionID      string `json:"session_id"` // aiod's session: drive it over REST with this id
	Language       string `json:"language"`
}

func (h *liveHub) model(s *stream.Session) kernelModel {
	name := s.Backend.Spec
	if rt := s.Runtime(); rt != nil && rt.Info().Name != "" {
		name = rt.Info().Name
	}
	if name == "" && h.s.env.PythonKernel != nil {
		name = h.s.env.PythonKernel.Name
	}
	return kernelModel{
		ID: s.KernelID, Name: name, LastActivity: jupyter.FormatDate(s.LastUsed()), ExecutionState: s.State(),
		Connections: s.Attached(), SessionID: s.ID, Language: s.Language,
	}
}

// jfail answers a Jupyter API error: {"message": …, "reason": …}.
func jfail(ctx *fasthttp.RequestCtx, status int, msg string) {
	jwriteJSON(ctx, status, map[string]any{"message": msg, "reason": fasthttp.StatusMessage(status)})
}

func jwriteJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.MarshalNoEscape(v)
	if err != nil {
		status, b = fasthttp.StatusInternalServerError, []byte(`{"message":"encode response","reason":null}`)
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.Response.SetBodyRaw(b)
}

func (h *liveHub) jupyterRoot(ctx *fasthttp.RequestCtx) {
	jwriteJSON(ctx, fasthttp.StatusOK, map[string]any{"version": Version, "implementation": "aiod"})
}

type kernelspecView struct {
	Name      string            `json:"name"`
	Spec      json.RawMessage   `json:"spec"`
	Resources map[string]string `json:"resources"`
}

func jSpecView(k *backend.KernelInfo) kernelspecView {
	return kernelspecView{Name: k.Name, Spec: k.Spec, Resources: map[string]string{}}
}

func (h *liveHub) listKernelspecs(ctx *fasthttp.RequestCtx) {
	env := h.s.env
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

func (h *liveHub) getKernelspec(ctx *fasthttp.RequestCtx) {
	name, fe := api.PathParam(ctx, "name")
	if fe != nil {
		jfail(ctx, fasthttp.StatusBadRequest, fe.Error())
		return
	}
	k := h.s.env.Kernel(name)
	if k == nil {
		jfail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("kernelspec %q not found", name))
		return
	}
	jwriteJSON(ctx, fasthttp.StatusOK, jSpecView(k))
}

func (h *liveHub) listKernels(ctx *fasthttp.RequestCtx) {
	out := []kernelModel{}
	for _, s := range h.kernels(tenantOf(ctx)) {
		out = append(out, h.model(s))
	}
	jwriteJSON(ctx, fasthttp.StatusOK, out)
}

func (h *liveHub) kernelOr404(ctx *fasthttp.RequestCtx) *stream.Session {
	id, fe := api.PathParam(ctx, "id")
	if fe != nil {
		jfail(ctx, fasthttp.StatusBadRequest, fe.Error())
		return nil
	}
	e := h.kernel(tenantOf(ctx), id)
	if e == nil {
		jfail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("kernel %s not found", id))
	}
	return e
}

func (h *liveHub) getKernel(ctx *fasthttp.RequestCtx) {
	if e := h.kernelOr404(ctx); e != nil {
		jwriteJSON(ctx, fasthttp.StatusOK, h.model(e))
	}
}

// startKernel is POST /api/kernels {"name": SPEC, "env": {…}}: a new session
// whose id is the new kernel's id, its kernel started before the answer.
func (h *liveHub) startKernel(ctx *fasthttp.RequestCtx) {
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
		spec = h.s.env.PythonKernel
		if spec == nil && len(h.s.env.Kernels) > 0 {
			spec = &h.s.env.Kernels[0]
		}
	} else {
		spec = h.s.env.Kernel(req.Name)
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
	tenant := tenantOf(ctx)
	b, err := h.s.rt.For(backend.Want{Language: lang, KernelSpec: spec.Name, Env: jEnv(req.Env), Tenant: tenant})
	if err != nil {
		jfail(ctx, fasthttp.StatusServiceUnavailable, err.Error())
		return
	}
	sess, _, err := h.s.reg.OpenFor(ownerOf(ctx), tenant, lang, id, b)
	var le *stream.LimitError
	if errors.As(err, &le) {
		// Jupyter front ends and Enterprise Gateway clients know a start
		// refused for resources as 403 "Resource Limit".
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(le.RetrySeconds()))
		jwriteJSON(ctx, fasthttp.StatusForbidden, map[string]any{"message": le.Msg, "reason": "Resource Limit"})
		return
	}
	if err != nil {
		jfail(ctx, fasthttp.StatusServiceUnavailable, err.Error())
		return
	}
	sctx, cancel := context.WithTimeout(h.s.reqCtx(), h.s.cfg.KernelStartTimeout)
	defer cancel()
	if _, err := sess.EnsureRuntime(sctx); err != nil {
		dctx, dcancel := context.WithTimeout(h.s.reqCtx(), 10*time.Second)
		h.s.reg.DeleteSession(dctx, sess)
		dcancel()
		if errors.As(err, &le) {
			ctx.Response.Header.Set("Retry-After", strconv.Itoa(le.RetrySeconds()))
		}
		jfail(ctx, fasthttp.StatusServiceUnavailable, err.Error())
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

func (h *liveHub) deleteKernel(ctx *fasthttp.RequestCtx) {
	e := h.kernelOr404(ctx)
	if e == nil {
		return
	}
	dctx, cancel := context.WithTimeout(h.s.reqCtx(), 30*time.Second)
	defer cancel()
	h.s.reg.DeleteSession(dctx, e)
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

func (h *liveHub) interruptKernel(ctx *fasthttp.RequestCtx) {
	e := h.kernelOr404(ctx)
	if e == nil {
		return
	}
	ictx, cancel := context.WithTimeout(h.s.reqCtx(), 10*time.Second)
	defer cancel()
	if err := e.Interrupt(ictx, "a client (Jupyter API interrupt)"); err != nil {
		jfail(ctx, fasthttp.StatusServiceUnavailable, err.Error())
		return
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

func (h *liveHub) restartKernel(ctx *fasthttp.RequestCtx) {
	e := h.kernelOr404(ctx)
	if e == nil {
		return
	}
	rctx, cancel := context.WithTimeout(h.s.reqCtx(), h.s.cfg.KernelStartTimeout+10*time.Second)
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
