package v1

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/execution"
)

// defaultKernel is the v1 name of the default Python kernel.
const defaultKernel = "python3"

// kernelAliases are the names the SDK's docs use; all of them run the one
// default Python kernel, whatever its minor version.
var kernelAliases = []string{"python3", "python3.10", "python3.11", "python3.12"}

// kernelFor resolves kernel_name: "" and the aliases are the default kernel
// (spec ""), the name of any other ipykernel kernelspec is that spec.
func (v *Surface) kernelFor(f *api.Fields) (name, spec string, fe *api.FieldError) {
	p := f.OptStr("kernel_name")
	if err := f.Err(); err != nil {
		return "", "", err
	}
	if p == nil || *p == "" {
		return defaultKernel, "", nil
	}
	name = *p
	for _, a := range v.kernelNames() {
		if a != name {
			continue
		}
		for _, k := range v.core.Env.Kernels {
			if k.Name == name && k.IPyKernel != "" && (v.core.Env.PythonKernel == nil || k.Name != v.core.Env.PythonKernel.Name) {
				return name, k.Name, nil
			}
		}
		return name, "", nil
	}
	return "", "", bodyErr("kernel_name", "literal_error", "unknown kernel %q: available kernels are %s",
		name, strings.Join(v.kernelNames(), ", "))
}

// kernelNames are the accepted kernel names: the aliases, python3.X of the
// default kernel's own Python, and every kernelspec running ipykernel.
func (v *Surface) kernelNames() []string {
	seen := map[string]bool{}
	var out []string
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, a := range kernelAliases {
		add(a)
	}
	if pk := v.core.Env.PythonKernel; pk != nil {
		if parts := strings.SplitN(pk.Python, ".", 3); len(parts) >= 2 {
			add("python" + parts[0] + "." + parts[1])
		}
	}
	for _, k := range v.core.Env.Kernels {
		if k.IPyKernel != "" && strings.EqualFold(k.Language, "python") {
			add(k.Name)
		}
	}
	return out
}

// parseJupyterExecute validates POST /v1/jupyter/execute (JupyterExecuteRequest).
func (v *Surface) parseJupyterExecute(ctx *fasthttp.RequestCtx, f *api.Fields) (execReq, *api.FieldError) {
	c := execReq{}
	c.Language, c.Kernel = "python", true
	c.Code = f.Code("code")
	if err := f.Err(); err != nil {
		return c, err
	}
	var fe *api.FieldError
	if c.KernelName, c.KernelSpec, fe = v.kernelFor(f); fe != nil {
		return c, fe
	}
	if c.SessionID, fe = optSessionID(f, "session_id"); fe != nil {
		return c, fe
	}
	if c.Timeout, fe = v.timeout(f); fe != nil {
		return c, fe
	}
	c.Cwd, fe = v.cwd(ctx, f)
	return c, fe
}

// jupyterExecuteData is JupyterExecuteResponse.
type jupyterExecuteData struct {
	KernelName     string                `json:"kernel_name"`
	SessionID      *string               `json:"session_id"`
	Status         string                `json:"status"`
	ExecutionCount *int                  `json:"execution_count"`
	Outputs        []execution.NineField `json:"outputs"`
	Code           string                `json:"code"`
	MsgID          string                `json:"msg_id"`
	Truncated      bool                  `json:"truncated,omitempty"`
	FreshRuntime   bool                  `json:"fresh_runtime,omitempty"`
}

func (v *Surface) jupyterExecute(ctx *fasthttp.RequestCtx) {
	c, ok := parseBody(ctx, func(f *api.Fields) (execReq, *api.FieldError) { return v.parseJupyterExecute(ctx, f) })
	if !ok {
		return
	}
	res, ok := v.runOr(ctx, c)
	if !ok {
		return
	}
	name := c.KernelName
	if c.SessionID != "" {
		if sess := v.core.Reg.Get(call.Tenant(ctx), "python", c.SessionID); sess != nil {
			name = v.kernelNameOf(sess)
		}
	}
	d := jupyterExecuteData{
		KernelName: name, SessionID: optID(res.SessionID), Status: res.Status,
		ExecutionCount: res.ExecutionCount, Outputs: make([]execution.NineField, len(res.Outputs)),
		Code: res.Code, MsgID: res.ID, Truncated: res.Truncated, FreshRuntime: res.Fresh,
	}
	for i, o := range res.Outputs {
		d.Outputs[i] = o.NineField()
	}
	answer(ctx, res, "", d)
}

// kernelNameOf is the kernel name a session is listed under.
func (v *Surface) kernelNameOf(sess *stream.Session) string {
	if n := v.metaOf(sess).kernelName; n != "" {
		return n
	}
	return defaultKernel
}

func (v *Surface) jupyterInfo(ctx *fasthttp.RequestCtx) {
	desc := "Python in Jupyter kernels (ipykernel), found through kernelspecs."
	if pk := v.core.Env.PythonKernel; pk != nil {
		desc = fmt.Sprintf("Python %s in Jupyter kernels (ipykernel %s, kernelspec %s). python3 and the python3.x names all run this kernel. Sessions idle for %d s are reclaimed; max_sessions 0 means no limit.",
			pk.Python, pk.IPyKernel, pk.Name, int(v.core.Cfg.KernelIdle/time.Second))
	} else if v.core.Env.BackendError != "" {
		desc = "no Python kernel is available: " + v.core.Env.BackendError
	}
	api.OK(ctx, map[string]any{
		"default_kernel":          defaultKernel,
		"available_kernels":       v.kernelNames(),
		"active_sessions":         len(v.sessionsOf(call.Tenant(ctx), "python", isKernel)),
		"session_timeout_seconds": int(v.core.Cfg.KernelIdle / time.Second),
		"max_sessions":            0,
		"description":             desc,
		"kernel_detection":        "kernelspec",
	})
}

// jupyterSessionInfo is SessionInfo.
type jupyterSessionInfo struct {
	KernelName string  `json:"kernel_name"`
	LastUsed   float64 `json:"last_used"` // epoch seconds
	AgeSeconds int64   `json:"age_seconds"`
	Busy       bool    `json:"busy"`
}

func (v *Surface) jupyterSessions(ctx *fasthttp.RequestCtx) {
	out := map[string]jupyterSessionInfo{}
	now := time.Now()
	for _, sess := range v.sessionsOf(call.Tenant(ctx), "python", isKernel) {
		out[sess.ID] = jupyterSessionInfo{
			KernelName: v.kernelNameOf(sess),
			LastUsed:   float64(sess.LastUsed().UnixMicro()) / 1e6,
			AgeSeconds: int64(now.Sub(sess.Created) / time.Second),
			Busy:       sess.Busy(),
		}
	}
	api.OK(ctx, map[string]any{"sessions": out})
}

func (v *Surface) jupyterDeleteAll(ctx *fasthttp.RequestCtx) {
	var ids []string
	tenant := call.Tenant(ctx)
	for _, sess := range v.sessionsOf(tenant, "python", isKernel) {
		if v.deleteSession(v.core.Ctx(), tenant, "python", sess.ID) > 0 {
			ids = append(ids, sess.ID)
		}
	}
	sort.Strings(ids)
	if ids == nil {
		ids = []string{}
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true,
		Message: fmt.Sprintf("%d session(s) deleted", len(ids)),
		Data:    map[string]any{"deleted": ids, "count": len(ids)}})
}

func (v *Surface) jupyterDelete(ctx *fasthttp.RequestCtx) {
	id, ok := pathSessionID(ctx)
	if !ok {
		return
	}
	tenant := call.Tenant(ctx)
	sess := v.core.Reg.Get(tenant, "python", id)
	if sess == nil || !isKernel(sess.Backend) {
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("jupyter session %q not found", id))
		return
	}
	n := v.deleteSession(v.core.Ctx(), tenant, "python", id)
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true,
		Message: fmt.Sprintf("session %q deleted", id),
		Data:    map[string]any{"session_id": id, "closed": n}})
}

// jupyterCreate starts a kernel session now, so that its first execute
// does not wait for the kernel to start.
func (v *Surface) jupyterCreate(ctx *fasthttp.RequestCtx) {
	f, ok := readBody(ctx)
	if !ok {
		return
	}
	c := execReq{}
	c.Language, c.Kernel, c.Code = "python", true, ""
	var fe *api.FieldError
	if c.SessionID, fe = optSessionID(f, "session_id"); fe == nil {
		if c.KernelName, c.KernelSpec, fe = v.kernelFor(f); fe == nil {
			c.Cwd, fe = v.cwd(ctx, f)
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
	existed := v.core.Reg.Get(c.Tenant, "python", c.SessionID) != nil
	// An empty cell starts the kernel and runs nothing (IPython does not
	// count it). Starting may take up to the kernel start timeout.
	c.Timeout = v.core.Cfg.KernelStartTimeout + 30*time.Second
	res, ce := v.run(v.core.Ctx(), c)
	if ce != nil {
		ce.Write(ctx)
		return
	}
	msg := fmt.Sprintf("kernel session %s started", c.SessionID)
	if existed {
		msg = fmt.Sprintf("kernel session %s already exists", c.SessionID)
	}
	if res.Status != execution.StatusOK {
		api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: false, Message: "start the kernel: " + res.Message(), Data: nil})
		return
	}
	name := c.KernelName
	if sess := v.core.Reg.Get(c.Tenant, "python", c.SessionID); sess != nil {
		name = v.kernelNameOf(sess)
	}
	api.OK(ctx, map[string]any{"session_id": c.SessionID, "kernel_name": name, "message": msg})
}
