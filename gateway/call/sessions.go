package call

import (
	"time"

	"github.com/aiod/aiod/stream/execution"
)

// SessionView is one session in listings (GET /v2/code/sessions, MCP's
// list_sessions).
type SessionView struct {
	SessionID   string    `json:"session_id"`
	Language    string    `json:"language"`
	Backend     string    `json:"backend"`
	Busy        bool      `json:"busy"`
	Running     bool      `json:"running"` // a runtime process is up
	PID         int       `json:"pid,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	LastUsed    time.Time `json:"last_used"`
	IdleSeconds float64   `json:"idle_seconds"`
	Watchers    int       `json:"watchers"`
	Executing   *ExecRef  `json:"executing"`    // the execution running now, or null
	Queued      []ExecRef `json:"queued"`       // executions waiting behind it, oldest first
	QueueLength int       `json:"queue_length"` // len(queued)
	// State is "saved" for a session whose state waits in a snapshot
	// (after idle reclaim or a restart) to be restored on its next use;
	// "" for a live one.
	State      string     `json:"state,omitempty"`
	SnapshotID string     `json:"snapshot_id,omitempty"` // with state saved: the snapshot its next use restores
	SavedAt    *time.Time `json:"saved_at,omitempty"`
}

// ExecRef is an execution in listings: its id, state and since when.
type ExecRef struct {
	ExecutionID string    `json:"execution_id"`
	State       string    `json:"state"`
	Since       time.Time `json:"since"`
}

// RefOf is the listing entry of an execution.
func RefOf(v execution.View) ExecRef {
	since := v.Created
	if !v.Started.IsZero() {
		since = v.Started
	}
	return ExecRef{ExecutionID: v.ID, State: v.State, Since: since.UTC()}
}

// SessionViews lists tenant's named sessions.
func (c *Core) SessionViews(tenant string) []SessionView {
	out := []SessionView{}
	for _, ss := range c.Reg.List(tenant) {
		v := SessionView{
			SessionID: ss.ID, Language: ss.Language, Backend: ss.Backend.Name, Busy: ss.Busy(),
			CreatedAt: ss.Created.UTC(), LastUsed: ss.LastUsed().UTC(),
			IdleSeconds: time.Since(ss.LastUsed()).Seconds(), Watchers: ss.Mux().Watchers(),
		}
		if rt := ss.Runtime(); rt != nil {
			v.Running, v.PID = true, rt.Info().PID
		}
		running, queued := ss.Activity()
		if running != nil {
			r := RefOf(*running)
			v.Executing = &r
		}
		v.Queued = []ExecRef{}
		for _, q := range queued {
			v.Queued = append(v.Queued, RefOf(q))
		}
		v.QueueLength = len(v.Queued)
		out = append(out, v)
	}
	return out
}
