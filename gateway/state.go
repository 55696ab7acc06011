package gateway

import (
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend"
	"github.com/aiod/aiod/stream/execution"
	"github.com/aiod/aiod/stream/snapshot"
)

// What aiod keeps in its state directory (--state-dir) besides the
// tenants' folders: the execution store's file.

// executionsFile is the execution store's file in the state directory.
const executionsFile = "executions.db"

// openExecutions opens the execution store: written through to the state
// directory when there is one, else in memory only. onError hears of its
// failed writes.
func openExecutions(cfg Config, onError func(error), shared execution.Shared) (*execution.Store, error) {
	xc := execution.Config{Retention: cfg.ExecutionRetention, RetentionBytes: cfg.ExecutionRetentionBytes,
		LogBytes: execution.LogBytesOf(cfg.OutputBudget), OnError: onError, Shared: shared}
	if dir := cfg.Isolation.StateDir; dir != "" {
		xc.Path = filepath.Join(dir, executionsFile)
	}
	return execution.OpenStore(xc)
}

// storeErrors counts the execution store's failed writes
// (aiod_execution_store_errors_total) and logs the first of each minute:
// a full disk fails every flush.
func storeErrors(log *slog.Logger, counters *stream.Counters) func(error) {
	var mu sync.Mutex
	var last time.Time
	var since int
	return func(err error) {
		counters.Count(stream.ExecutionStoreErrors, "", 1)
		mu.Lock()
		defer mu.Unlock()
		since++
		if now := time.Now(); now.Sub(last) >= time.Minute {
			log.Warn("execution store: a write failed; the executions wait in memory and are written again at the next flush",
				"err", err, "failures", since)
			last, since = now, 0
		}
	}
}

// snapshotsDir is the sessions' snapshots' folder in the state directory;
// their key is beside it (snapshot.key).
const snapshotsDir = "snapshots"

// openSnapshots opens the sessions' snapshots in the state directory; nil
// when there is none (snapshots need one).
// Payloads go through the runtimes' scratch folders (rt.Scratch).
func openSnapshots(cfg Config, rt *backend.Runtimes) (*snapshot.Manager, error) {
	dir := cfg.Isolation.StateDir
	if dir == "" {
		return nil, nil
	}
	scratch := func(s *stream.Session) *snapshot.Scratch {
		d := rt.Scratch(s.Tenant, s.Backend.Name)
		if d == nil {
			return nil
		}
		return &snapshot.Scratch{View: d.View, Host: d.Host, UID: d.UID, GID: d.GID}
	}
	return snapshot.Open(snapshot.Config{Dir: filepath.Join(dir, snapshotsDir), MaxBytes: cfg.SnapshotMaxBytes,
		TotalBytes: cfg.SnapshotTotalBytes, TenantBytes: cfg.SnapshotTenantBytes, Retention: cfg.SnapshotRetention,
		Scratch: scratch, Key: snapshotKey(cfg.Cluster), Logger: cfg.Logger})
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
