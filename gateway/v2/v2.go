// Package v2 serves aiod's own code routes (docs/v2-contract.md) on the
// call core: execute (JSON, SSE or NDJSON), sessions, executions,
// snapshots and forks, completion and inspection. Discovery (/v2/code/info,
// /v2/sandbox) is the gateway's, which knows the whole daemon.
package v2

import (
	"time"

	"github.com/fasthttp/router"

	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/snapshot"
)

// Config is what the surface needs besides the core.
type Config struct {
	Registry  *stream.Registry
	Snapshots *snapshot.Manager // nil without a state directory
	// MaxTimeout bounds an execution's wait (GET /v2/code/executions/{id}?wait=).
	MaxTimeout time.Duration
	// KernelStartTimeout bounds a restart's and a fork's start.
	KernelStartTimeout time.Duration
}

// Surface is the v2 code routes.
type Surface struct {
	core  *call.Core
	reg   *stream.Registry
	snaps *snapshot.Manager
	cfg   Config
}

// New makes the surface.
func New(core *call.Core, cfg Config) *Surface {
	return &Surface{core: core, reg: cfg.Registry, snaps: cfg.Snapshots, cfg: cfg}
}

// Register adds the v2 code routes.
func (s *Surface) Register(r *router.Router) {
	r.POST("/v2/code/execute", s.v2Execute)
	r.GET("/v2/code/sessions", s.v2ListSessions)
	r.DELETE("/v2/code/sessions/{id}", s.v2DeleteSession)
	r.POST("/v2/code/sessions/{id}/interrupt", s.v2InterruptSession)
	r.POST("/v2/code/sessions/{id}/restart", s.v2RestartSession)
	r.POST("/v2/code/sessions/{id}/snapshot", s.v2SnapshotSession)
	r.POST("/v2/code/sessions/{id}/fork", s.v2ForkSession)
	r.GET("/v2/code/sessions/{id}/stats", s.v2SessionStats) // stats.go
	r.POST("/v2/code/complete", s.v2Complete)
	r.POST("/v2/code/inspect", s.v2Inspect)
	r.GET("/v2/code/executions/{id}", s.v2GetExecution)
	r.GET("/v2/code/executions/{id}/events", s.v2ExecutionEvents)
	r.POST("/v2/code/executions/{id}/interrupt", s.v2InterruptExecution)
}
