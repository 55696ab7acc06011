package gateway

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend"
)

// codeInterpreter is capabilities.code_interpreter of /v2/sandbox and
// code_interpreter of /v1/capabilities.
type codeInterpreter struct {
	Available     bool                           `json:"available"`
	Backend       string                         `json:"backend"`
	BackendError  string                         `json:"backend_error,omitempty"`
	Languages     []string                       `json:"languages"`
	PythonKernels []backend.KernelInfo           `json:"python_kernels"`
	DefaultKernel string                         `json:"default_kernel"`
	Interpreters  map[string]backend.Interpreter `json:"interpreters"`
	Limits        limits                         `json:"limits"`
	Pools         map[string]stream.PoolStats    `json:"pools"`
	KernelStart   backend.KernelStart            `json:"kernel_start"`
	Isolation     backend.IsolationReport        `json:"isolation"` // limits, user and environment of local runtimes
	Remote        *backend.RemoteInfo            `json:"remote"`    // AIO_JUPYTER_ENDPOINT; null when not set
}

// pythonBackend is the backend new Python sessions get on the code routes
// right now: "jupyter" while AIO_JUPYTER_ENDPOINT answers.
func (s *Server) pythonBackend() string { return s.rt.PythonBackend() }

// limits is every limit a caller can run into, with the flag that sets it
// in docs/configuration.md; 0 means off (unlimited) for the admission limits. Live
// counts sit beside the caps they are counted against.
type limits struct {
	DefaultTimeout            float64 `json:"default_timeout"`
	MaxTimeout                float64 `json:"max_timeout"`
	KernelIdleSeconds         float64 `json:"kernel_idle_seconds"`
	NativeIdleSeconds         float64 `json:"native_idle_seconds"`
	OutputBudgetBytes         int     `json:"output_budget_bytes"`
	MaxBodyBytes              int     `json:"max_body_bytes"`
	HeldCodeTenantBytes       int64   `json:"held_code_tenant_bytes"` // 0: none
	HeldCodeTotalBytes        int64   `json:"held_code_total_bytes"`  // 0: none
	HeldCodeBytes             int64   `json:"held_code_bytes"`
	MaxSessions               int     `json:"max_sessions"`
	MaxSessionsPerKey         int     `json:"max_sessions_per_key"`
	LiveSessions              int     `json:"live_sessions"`
	MaxConcurrentStarts       int     `json:"max_concurrent_starts"`
	StartQueue                int     `json:"start_queue"`
	StartQueueTimeoutSeconds  float64 `json:"start_queue_timeout_seconds"`
	Starting                  int     `json:"starting"`
	StartsQueued              int     `json:"starts_queued"`
	WSMaxInFlight             int     `json:"ws_max_in_flight"`
	WSQueueBytes              int     `json:"ws_queue_bytes"`
	ExecutionRetentionSeconds float64 `json:"execution_retention_seconds"`
	ExecutionRetentionBytes   int     `json:"execution_retention_bytes"`
	UnauthBodyBytes           int     `json:"unauthenticated_body_bytes"` // body without valid credentials, when they are required
	MaxHeaderBytes            int     `json:"max_header_bytes"`
	MaxConnsPerIP             int     `json:"max_conns_per_ip"` // 0: none
	MaxTicketsPerCaller       int     `json:"max_tickets_per_caller"`
	MaxTickets                int     `json:"max_tickets"`
}

func (s *Server) limits() limits {
	a, lim := s.reg.AdmissionStats(), s.hub.Limits()
	l := limits{
		DefaultTimeout: s.cfg.DefaultTimeout.Seconds(), MaxTimeout: s.cfg.MaxTimeout.Seconds(),
		KernelIdleSeconds: s.cfg.KernelIdle.Seconds(), NativeIdleSeconds: s.cfg.NativeIdle.Seconds(),
		OutputBudgetBytes: s.cfg.OutputBudget, MaxBodyBytes: s.cfg.MaxBody,
		MaxSessions: a.Limit.MaxSessions, MaxSessionsPerKey: a.Limit.MaxSessionsPerKey, LiveSessions: a.Live,
		MaxConcurrentStarts: a.Limit.MaxStarts, StartQueue: a.Limit.StartQueue,
		StartQueueTimeoutSeconds: a.Limit.StartQueueWait.Seconds(), Starting: a.Gate.Starting, StartsQueued: a.Gate.Queued,
		WSMaxInFlight: lim.MaxInFlight, WSQueueBytes: lim.QueueBytes,
		ExecutionRetentionSeconds: s.cfg.ExecutionRetention.Seconds(), ExecutionRetentionBytes: s.cfg.ExecutionRetentionBytes,
		UnauthBodyBytes: UnauthBodyLimit, MaxHeaderBytes: headerLimit, MaxConnsPerIP: s.cfg.MaxConnsPerIP,
	}
	l.MaxTicketsPerCaller, l.MaxTickets = s.guard.TicketLimits()
	l.HeldCodeTenantBytes, l.HeldCodeTotalBytes = s.cfg.HeldCodeTenant, s.cfg.HeldCodeTotal
	_, l.HeldCodeBytes = s.core.Held("")
	return l
}

func (s *Server) codeInterpreter(tenant string) codeInterpreter {
	env := s.env
	ci := codeInterpreter{
		Backend:       s.pythonBackend(),
		BackendError:  env.BackendError,
		Languages:     []string{},
		PythonKernels: []backend.KernelInfo{},
		Interpreters:  map[string]backend.Interpreter{"python": env.Python, "javascript": env.Node, "bash": env.Bash},
		Limits:        s.limits(),
		Pools:         s.rt.PoolStats(tenant),
		KernelStart:   s.rt.KernelStart(),
		Isolation:     s.rt.Isolation(tenant),
		Remote:        s.rt.Remote(),
	}
	for _, k := range env.Kernels {
		if k.IPyKernel != "" {
			ci.PythonKernels = append(ci.PythonKernels, k)
		}
	}
	if env.PythonKernel != nil {
		ci.DefaultKernel = env.PythonKernel.Name
	}
	if env.BackendError == "" || ci.Backend == "jupyter" {
		ci.Languages = append(ci.Languages, "python")
	}
	if env.Node.Error == "" {
		ci.Languages = append(ci.Languages, "javascript")
	}
	if env.Bash.Error == "" {
		ci.Languages = append(ci.Languages, "bash")
	}
	ci.Available = len(ci.Languages) > 0
	return ci
}

func (s *Server) v2Sandbox(ctx *fasthttp.RequestCtx) {
	api.OK(ctx, map[string]any{
		"version":        Version,
		"build":          Build(),
		"uptime_seconds": int(time.Since(s.started).Seconds()),
		"sessions":       s.reg.Len(),
		"capabilities": map[string]any{
			"code_interpreter": s.codeInterpreter(call.Tenant(ctx)),
			"file_system":      map[string]any{"available": true, "routes": []string{"/v2/fs/*", "/v1/file/*"}},
			"streaming":        map[string]any{"available": true, "websocket": "/v2/code/ws"},
			"jupyter_api":      map[string]any{"available": true, "base": "/api"},
			"notebook":         map[string]any{"available": true, "path": "/"},
		},
	})
}

func (s *Server) v1Capabilities(ctx *fasthttp.RequestCtx) {
	api.OK(ctx, map[string]any{"code_interpreter": s.codeInterpreter(call.Tenant(ctx))})
}

func (s *Server) v2CodeInfo(ctx *fasthttp.RequestCtx) {
	l := s.limits()
	api.OK(ctx, map[string]any{
		"backend":             s.pythonBackend(),
		"remote":              s.codeInterpreter(call.Tenant(ctx)).Remote,
		"languages":           s.core.LanguageInfos(),
		"python_kernels":      s.codeInterpreter(call.Tenant(ctx)).PythonKernels,
		"default_timeout":     l.DefaultTimeout,
		"max_timeout":         l.MaxTimeout,
		"kernel_idle_seconds": l.KernelIdleSeconds,
		"native_idle_seconds": l.NativeIdleSeconds,
		"output_budget_bytes": l.OutputBudgetBytes,
		"max_body_bytes":      l.MaxBodyBytes,
		"limits":              l,
		"pools":               s.rt.PoolStats(call.Tenant(ctx)),
		"kernel_start":        s.rt.KernelStart(),
		"isolation":           s.rt.Isolation(call.Tenant(ctx)),
		"executions":          s.executionStats(),
		"snapshots":           s.snapshotStats(),
		"warnings":            append([]string{}, s.env.Warnings...),
	})
}

// executionStats is what the execution store holds, and its bounds.
func (s *Server) executionStats() map[string]any {
	st := s.reg.Executions().Stats()
	cfg := s.reg.Executions().Config()
	out := map[string]any{
		"held": st.Held, "finished": st.Finished, "finished_bytes": st.Bytes, "evicted": st.Evicted,
		"retention_seconds": cfg.Retention.Seconds(), "retention_bytes": cfg.RetentionBytes, "log_bytes": cfg.LogBytes,
		"durable": false,
	}
	if d, ok := s.reg.Executions().Disk(); ok {
		// Written through to the state directory: retention applies there,
		// and memory holds the running ones and a cache of the latest.
		out["durable"], out["stored"], out["stored_bytes"], out["cache_bytes"] = true, d.Records, d.Bytes, cfg.CacheBytes
	}
	return out
}
