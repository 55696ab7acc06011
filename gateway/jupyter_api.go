package gateway

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aiod/aiod/kernel"
	"github.com/aiod/aiod/stream"
	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
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

// kernelEntry is one session seen as a Jupyter kernel.
type kernelEntry struct {
	id   string
	sess *stream.Session
	name string // kernelspec name when known

	conns   atomic.Int32           // channels sockets attached
	state   atomic.Pointer[string] // last execution_state seen on iopub, or set by restart
	touched atomic.Int64           // unix nanoseconds of the last message either way

	mu     sync.Mutex     // guards deadRT
	deadRT stream.Runtime // the runtime whose death set state "dead"
}

// markDead records that rt (nil: no runtime could be started) died.
func (e *kernelEntry) markDead(rt stream.Runtime) {
	e.mu.Lock()
	e.deadRT = rt
	e.mu.Unlock()
	e.setState("dead")
}

// currentState is the recorded state, except that "dead" no longer holds
// once another runtime runs (a REST call or a restart started one).
func (e *kernelEntry) currentState() string {
	st := "idle"
	if p := e.state.Load(); p != nil {
		st = *p
	}
	if st != "dead" {
		return st
	}
	rt := e.sess.Runtime()
	if rt == nil {
		return st
	}
	select {
	case <-rt.Done():
		return st
	default:
	}
	e.mu.Lock()
	same := rt == e.deadRT
	e.mu.Unlock()
	if same {
		return st
	}
	return "idle"
}

var jUUIDRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// kernels returns the kernel of every kernel-backed session, assigning ids
// to new ones and forgetting sessions that are gone.
func (h *liveHub) kernels() []*kernelEntry {
	live := map[*stream.Session]bool{}
	var sessions []*stream.Session
	for _, s := range h.s.reg.List() {
		if s.Backend.Name == "kernel" && s.ID != "" {
			live[s] = true
			sessions = append(sessions, s)
		}
	}
	h.kmu.Lock()
	defer h.kmu.Unlock()
	for s, e := range h.bySess {
		if !live[s] {
			delete(h.bySess, s)
			delete(h.byID, e.id)
			delete(h.created, e.id)
		}
	}
	out := make([]*kernelEntry, 0, len(sessions))
	for _, s := range sessions {
		e := h.bySess[s]
		if e == nil {
			id := s.ID
			if !jUUIDRE.MatchString(id) || h.byID[strings.ToLower(id)] != nil {
				id = stream.NewID()
			}
			id = strings.ToLower(id)
			e = &kernelEntry{id: id, sess: s, name: h.created[id]}
			h.bySess[s], h.byID[id] = e, e
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].sess.Created.Before(out[j].sess.Created) })
	return out
}

// kernel returns the kernel with that id, or nil.
func (h *liveHub) kernel(id string) *kernelEntry {
	h.kernels()
	h.kmu.Lock()
	defer h.kmu.Unlock()
	return h.byID[strings.ToLower(id)]
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

// jupyterTime is the format jupyter_server parses last_activity with.
const jupyterTime = "2006-01-02T15:04:05.000000Z"

func (h *liveHub) model(e *kernelEntry) kernelModel {
	name := e.name
	if rt := e.sess.Runtime(); rt != nil && rt.Info().Name != "" {
		name = rt.Info().Name
	}
	if name == "" && h.s.env.PythonKernel != nil {
		name = h.s.env.PythonKernel.Name
	}
	last := e.sess.LastUsed()
	if t := time.Unix(0, e.touched.Load()); t.After(last) {
		last = t
	}
	state := e.currentState()
	if e.sess.Busy() && state != "restarting" {
		state = "busy"
	}
	return kernelModel{
		ID: e.id, Name: name, LastActivity: last.UTC().Format(jupyterTime), ExecutionState: state,
		Connections: int(e.conns.Load()), SessionID: e.sess.ID, Language: e.sess.Language,
	}
}

func (e *kernelEntry) setState(s string) { e.state.Store(&s) }

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

func jSpecView(k *KernelInfo) kernelspecView {
	raw := k.spec.Raw
	if len(raw) == 0 {
		raw, _ = json.Marshal(map[string]any{"argv": k.spec.Argv, "display_name": k.DisplayName, "language": k.Language})
	}
	return kernelspecView{Name: k.Name, Spec: raw, Resources: map[string]string{}}
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

func (h *liveHub) specNamed(name string) *KernelInfo {
	for i := range h.s.env.Kernels {
		if h.s.env.Kernels[i].Name == name {
			return &h.s.env.Kernels[i]
		}
	}
	return nil
}

func (h *liveHub) getKernelspec(ctx *fasthttp.RequestCtx) {
	name, _ := ctx.UserValue("name").(string)
	k := h.specNamed(name)
	if k == nil {
		jfail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("kernelspec %q not found", name))
		return
	}
	jwriteJSON(ctx, fasthttp.StatusOK, jSpecView(k))
}

func (h *liveHub) listKernels(ctx *fasthttp.RequestCtx) {
	out := []kernelModel{}
	for _, e := range h.kernels() {
		out = append(out, h.model(e))
	}
	jwriteJSON(ctx, fasthttp.StatusOK, out)
}

func (h *liveHub) kernelOr404(ctx *fasthttp.RequestCtx) *kernelEntry {
	id, _ := ctx.UserValue("id").(string)
	e := h.kernel(id)
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
	var spec *KernelInfo
	if req.Name == "" {
		spec = h.s.env.PythonKernel
		if spec == nil && len(h.s.env.Kernels) > 0 {
			spec = &h.s.env.Kernels[0]
		}
	} else {
		spec = h.specNamed(req.Name)
	}
	if spec == nil {
		msg := fmt.Sprintf("no kernelspec %q: see GET /api/kernelspecs", req.Name)
		if req.Name == "" {
			msg = "no Jupyter kernelspec was found; " + ipykernelHint
		}
		jfail(ctx, fasthttp.StatusNotFound, msg)
		return
	}
	id := stream.NewID()
	lang := strings.ToLower(spec.Language)
	if lang == "" {
		lang = "python"
	}
	b := h.s.kernelBackend(spec.spec)
	b.Language = lang
	if len(req.Env) > 0 {
		b.Start = h.kernelStartWithEnv(spec.spec, req.Env)
	}
	h.kmu.Lock()
	h.created[id] = spec.Name
	h.kmu.Unlock()
	sess, _, err := h.s.reg.Open(lang, id, b)
	if err != nil {
		jfail(ctx, fasthttp.StatusServiceUnavailable, err.Error())
		return
	}
	sctx, cancel := context.WithTimeout(h.s.reqCtx(), h.s.cfg.KernelStartTimeout)
	defer cancel()
	if _, err := sess.EnsureRuntime(sctx); err != nil {
		h.kmu.Lock()
		delete(h.created, id)
		h.kmu.Unlock()
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		h.s.reg.DeleteSession(dctx, sess)
		dcancel()
		jfail(ctx, fasthttp.StatusServiceUnavailable, err.Error())
		return
	}
	e := h.kernel(id)
	if e == nil {
		jfail(ctx, fasthttp.StatusConflict, "the kernel was shut down while it started")
		return
	}
	ctx.Response.Header.Set("Location", "/api/kernels/"+id)
	jwriteJSON(ctx, fasthttp.StatusCreated, h.model(e))
}

// kernelStartWithEnv is the kernel backend's start with extra environment
// (the KERNEL_* variables jupyter server forwards).
func (h *liveHub) kernelStartWithEnv(spec *kernel.Spec, env map[string]string) func(context.Context, kernel.Handler) (stream.Runtime, error) {
	extra := make([]string, 0, len(env))
	for k, v := range env {
		if k != "" && !strings.ContainsAny(k, "=\x00") {
			extra = append(extra, k+"="+v)
		}
	}
	sort.Strings(extra)
	cfg := h.s.cfg
	return func(ctx context.Context, hd kernel.Handler) (stream.Runtime, error) {
		k, err := kernel.Start(ctx, kernel.Options{
			Spec: spec, Handler: hd, Cwd: cfg.Workdir, Env: extra,
			StartTimeout: cfg.KernelStartTimeout, Logger: h.s.log,
			Templates: h.s.pools.templates, Transport: cfg.KernelTransport,
		})
		if err != nil {
			return nil, fmt.Errorf("start kernel %s: %w", spec.Name, err)
		}
		return k, nil
	}
}

func (h *liveHub) deleteKernel(ctx *fasthttp.RequestCtx) {
	e := h.kernelOr404(ctx)
	if e == nil {
		return
	}
	dctx, cancel := context.WithTimeout(h.s.reqCtx(), 30*time.Second)
	defer cancel()
	h.s.reg.DeleteSession(dctx, e.sess)
	h.kernels() // forget it
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

func (h *liveHub) interruptKernel(ctx *fasthttp.RequestCtx) {
	e := h.kernelOr404(ctx)
	if e == nil {
		return
	}
	ictx, cancel := context.WithTimeout(h.s.reqCtx(), 10*time.Second)
	defer cancel()
	if err := e.sess.Interrupt(ictx); err != nil {
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
	e.setState("restarting")
	rctx, cancel := context.WithTimeout(h.s.reqCtx(), h.s.cfg.KernelStartTimeout+10*time.Second)
	defer cancel()
	if _, err := e.sess.Restart(rctx); err != nil {
		e.markDead(nil)
		status := fasthttp.StatusServiceUnavailable
		if errors.Is(err, stream.ErrSessionClosed) {
			status = fasthttp.StatusNotFound
		}
		jfail(ctx, status, "restart kernel: "+err.Error())
		return
	}
	e.setState("idle")
	jwriteJSON(ctx, fasthttp.StatusOK, h.model(e))
}
