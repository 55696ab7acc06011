package gateway

import (
	"path/filepath"

	"github.com/aiod/aiod/stream/execution"
	"github.com/aiod/aiod/stream/snapshot"
)

// What aiod keeps in its state directory (--state-dir) besides the
// tenants' folders: the execution store's file.

// executionsFile is the execution store's file in the state directory.
const executionsFile = "executions.db"

// openExecutions opens the execution store: written through to the state
// directory when there is one, else in memory only.
func openExecutions(cfg Config) (*execution.Store, error) {
	xc := execution.Config{Retention: cfg.ExecutionRetention, RetentionBytes: cfg.ExecutionRetentionBytes, LogBytes: cfg.OutputBudget}
	if dir := cfg.Isolation.StateDir; dir != "" {
		xc.Path = filepath.Join(dir, executionsFile)
	}
	return execution.OpenStore(xc)
}

// snapshotsDir is the sessions' snapshots' folder in the state directory;
// their key is beside it (snapshot.key).
const snapshotsDir = "snapshots"

// openSnapshots opens the sessions' snapshots in the state directory; nil
// when there is none (snapshots need one).
func openSnapshots(cfg Config) (*snapshot.Manager, error) {
	dir := cfg.Isolation.StateDir
	if dir == "" {
		return nil, nil
	}
	return snapshot.Open(snapshot.Config{Dir: filepath.Join(dir, snapshotsDir), MaxBytes: cfg.SnapshotMaxBytes,
		TotalBytes: cfg.SnapshotTotalBytes, Retention: cfg.SnapshotRetention, Logger: cfg.Logger})
}

// snapshotStats is what /v2/code/info says of the snapshots.
func (s *Server) snapshotStats() map[string]any {
	if s.snaps == nil {
		return map[string]any{"enabled": false}
	}
	c, st := s.snaps.Config(), s.snaps.Stats()
	return map[string]any{"enabled": true, "max_bytes": c.MaxBytes, "total_bytes": c.TotalBytes,
		"retention_seconds": c.Retention.Seconds(), "sessions": st.Sessions, "snapshots": st.Snapshots,
		"saved_sessions": st.Waiting, "bytes": st.Bytes}
}
