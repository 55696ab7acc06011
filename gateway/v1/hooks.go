package v1

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
)

// Lifecycle hooks (the reference's /v1/sandbox/hooks): shell commands a
// tenant registers to run when the sandbox stops, to flush state or write
// a marker. aiod runs them at its shutdown, before the sessions are saved
// and while every runtime still runs, and before it lets go of a tenant's
// sandbox after idling (--tenant-idle): as bash one-shots of their tenant
// (its user, sandbox and limits), by priority (lower first; the same
// priority at once), each bounded by its timeout. One that fails or times
// out is logged and the stop goes on. They are kept in the state
// directory (hooks.json), so that a daemon restarted runs them at its
// next stop too; per tenant, and another tenant's are unknown to them.

const (
	hooksFile      = "hooks.json"
	maxHooks       = 16 // a tenant's
	maxHookCommand = 4096
	defaultHookSec = 10
	maxHookSec     = 60
	hookEvent      = "shutdown"
)

var hookName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// sandboxHook is SandboxHook.
type sandboxHook struct {
	Name     string  `json:"name"`
	Event    string  `json:"event"`
	Command  string  `json:"command"`
	Timeout  float64 `json:"timeout"`
	Priority int64   `json:"priority"`
	Source   string  `json:"source"`
}

// hooks is every tenant's hooks, kept in hooksFile.
type hooks struct{ tenantStore[sandboxHook] }

func loadHooks(stateDir string) *hooks {
	h := &hooks{}
	h.load(stateDir, hooksFile)
	return h
}

// POST /v1/sandbox/hooks
func (v *Surface) registerHook(ctx *fasthttp.RequestCtx) {
	hk, ok := parseBody(ctx, parseHook)
	if !ok {
		return
	}
	tenant := call.Tenant(ctx)
	h := v.hooks
	h.mu.Lock()
	mine := h.byTenant[tenant]
	if _, again := mine[hk.Name]; !again && len(mine) >= maxHooks {
		h.mu.Unlock()
		api.Fail(ctx, fasthttp.StatusConflict, fmt.Sprintf("at most %d hooks a tenant: remove one (DELETE /v1/sandbox/hooks/{name})", maxHooks))
		return
	}
	if mine == nil {
		mine = map[string]sandboxHook{}
		h.byTenant[tenant] = mine
	}
	mine[hk.Name] = hk
	err := h.saveLocked()
	h.mu.Unlock()
	if err != nil {
		api.Fail(ctx, fasthttp.StatusInternalServerError, "keep the hook in the state directory: "+err.Error())
		return
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: "hook " + hk.Name + " registered", Data: hk})
}

func parseHook(f *api.Fields) (sandboxHook, *api.FieldError) {
	hk := sandboxHook{Name: f.Str("name", true), Event: hookEvent, Command: f.Str("command", true),
		Timeout: defaultHookSec, Priority: 100, Source: "api"}
	if p := f.OptStr("event"); p != nil {
		hk.Event = *p
	}
	if t, ok := f.Float("timeout"); ok {
		hk.Timeout = t
	}
	if p, ok := f.Int("priority"); ok {
		hk.Priority = p
	}
	if fe := f.Err(); fe != nil {
		return hk, fe
	}
	switch {
	case !hookName.MatchString(hk.Name):
		return hk, bodyErr("name", "string_pattern_mismatch", "must be 1 to 64 of a-z, A-Z, 0-9, _ and -, got %q", hk.Name)
	case hk.Event != hookEvent:
		return hk, bodyErr("event", "literal_error", "the one lifecycle event is %q, got %q", hookEvent, hk.Event)
	case strings.TrimSpace(hk.Command) == "":
		return hk, bodyErr("command", "string_too_short", "is empty")
	case len(hk.Command) > maxHookCommand:
		return hk, bodyErr("command", "string_too_long", "is %d bytes; at most %d", len(hk.Command), maxHookCommand)
	case hk.Timeout <= 0 || hk.Timeout > maxHookSec:
		return hk, bodyErr("timeout", "less_than_equal", "must be more than 0 and at most %d seconds (a hook holds up aiod's stop), got %g", maxHookSec, hk.Timeout)
	}
	return hk, nil
}

// GET /v1/sandbox/hooks[?event=shutdown]
func (v *Surface) listHooks(ctx *fasthttp.RequestCtx) {
	event := string(ctx.QueryArgs().Peek("event"))
	list := []sandboxHook{}
	for _, hk := range v.hooks.of(call.Tenant(ctx)) {
		if event == "" || hk.Event == event {
			list = append(list, hk)
		}
	}
	api.OK(ctx, list)
}

// DELETE /v1/sandbox/hooks/{name}
func (v *Surface) removeHook(ctx *fasthttp.RequestCtx) {
	name, fe := api.PathParam(ctx, "name")
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return
	}
	tenant := call.Tenant(ctx)
	h := v.hooks
	h.mu.Lock()
	_, ok := h.byTenant[tenant][name]
	var err error
	if ok {
		delete(h.byTenant[tenant], name)
		if len(h.byTenant[tenant]) == 0 {
			delete(h.byTenant, tenant)
		}
		err = h.saveLocked()
	}
	h.mu.Unlock()
	switch {
	case !ok:
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("hook %q not found", name))
	case err != nil:
		api.Fail(ctx, fasthttp.StatusInternalServerError, "keep the hooks in the state directory: "+err.Error())
	default:
		api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: "hook " + name + " removed", Data: nil})
	}
}

// of is tenant's hooks, by priority then name.
func (h *hooks) of(tenant string) []sandboxHook {
	h.mu.Lock()
	defer h.mu.Unlock()
	list := make([]sandboxHook, 0, len(h.byTenant[tenant]))
	for _, hk := range h.byTenant[tenant] {
		list = append(list, hk)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Priority != list[j].Priority {
			return list[i].Priority < list[j].Priority
		}
		return list[i].Name < list[j].Name
	})
	return list
}

// RunShutdownHooks runs every tenant's shutdown hooks (tenants at once,
// each tenant's by priority), bounded by their timeouts and by ctx; call
// it while the runtimes still run, before the sessions are saved.
func (v *Surface) RunShutdownHooks(ctx context.Context) {
	v.hooks.mu.Lock()
	tenants := make([]string, 0, len(v.hooks.byTenant))
	for t := range v.hooks.byTenant {
		tenants = append(tenants, t)
	}
	v.hooks.mu.Unlock()
	var wg sync.WaitGroup
	for _, tenant := range tenants {
		wg.Go(func() { v.RunTenantHooks(ctx, tenant) })
	}
	wg.Wait()
}

// RunTenantHooks runs tenant's hooks by priority (the same priority at
// once), each bounded by its timeout and all by ctx: at aiod's stop, and
// when the tenant's sandbox is let go after idling (--tenant-idle).
func (v *Surface) RunTenantHooks(ctx context.Context, tenant string) {
	list := v.hooks.of(tenant)
	for i := 0; i < len(list); {
		j := i
		var group sync.WaitGroup
		for ; j < len(list) && list[j].Priority == list[i].Priority; j++ {
			hk := list[j]
			group.Go(func() { v.runHook(ctx, tenant, hk) })
		}
		group.Wait()
		i = j
	}
}

// runHook runs one hook as a bash one-shot of tenant and logs how it went.
func (v *Surface) runHook(ctx context.Context, tenant string, hk sandboxHook) {
	timeout := time.Duration(hk.Timeout * float64(time.Second))
	began := time.Now()
	res, ce := v.core.Execute(ctx, call.Call{Language: "bash", Code: hk.Command, Timeout: timeout, Tenant: tenant})
	log := v.log.With("tenant", tenant, "hook", hk.Name, "event", hk.Event, "took", time.Since(began).Round(time.Millisecond))
	switch {
	case ce != nil:
		log.Warn("hook did not run", "err", ce.Msg)
	case !res.Success():
		log.Warn("hook failed", "status", res.Status, "exit_code", res.ExitCode(), "message", res.Message())
	default:
		log.Info("hook ran")
	}
}
