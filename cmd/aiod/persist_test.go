package main

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// restart stops d with SIGTERM and starts a daemon on the same arguments
// (its state directory among them).
func restart(t *testing.T, d *daemon, args ...string) *daemon {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("aiod exited %d after SIGTERM; stderr:\n%s", code, d.stderr)
	}
	return startDaemon(t, args...)
}

// An execution finished before a restart is fetched by id after it, with
// its outputs, from the same state directory.
func TestExecutionSurvivesRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"--state-dir", t.TempDir()}
	d := startDaemon(t, args...)
	var env envelope[struct {
		execData
		ExecutionID string `json:"execution_id"`
	}]
	d.do(ctx, http.MethodPost, "/v2/code/execute", map[string]any{"language": "python", "session_id": "keep",
		"execution_id": "before-restart", "code": "print('kept across', 'restarts')"}, &env)
	if env.Data.Stdout != "kept across restarts\n" || env.Data.ExecutionID != "before-restart" {
		t.Fatalf("execute: %+v", env)
	}
	d = restart(t, d, args...)
	var got envelope[struct {
		execData
		State       string `json:"state"`
		ExecutionID string `json:"execution_id"`
	}]
	d.do(ctx, http.MethodGet, "/v2/code/executions/before-restart", nil, &got)
	if !got.Success || got.Data.State != "done" || got.Data.Stdout != "kept across restarts\n" || got.Data.Status != "ok" {
		t.Fatalf("after the restart: %+v", got)
	}
}
