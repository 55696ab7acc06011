package gateway

import (
	"path/filepath"

	"github.com/aiod/aiod/stream/execution"
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
