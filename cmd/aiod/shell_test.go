package main

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// The shells on the real binary: a /v1/shell session keeps its state, a
// /v1/bash command says its exit code, language bash runs on /v2, and a
// terminal starts and ends (the leak check of TestMain sees no process
// left when the daemon is gone).
func TestShellsOnTheBinary(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type env[T any] struct {
		Success bool   `json:"success"`
		Message string `json:"message"`
		Data    T      `json:"data"`
	}
	var sh env[struct {
		SessionID string `json:"session_id"`
		Status    string `json:"status"`
		Output    string `json:"output"`
		ExitCode  *int   `json:"exit_code"`
	}]
	d.do(ctx, http.MethodPost, "/v1/shell/exec", map[string]any{"command": "cd /tmp && export A=kept"}, &sh)
	sid := sh.Data.SessionID
	d.do(ctx, http.MethodPost, "/v1/shell/exec", map[string]any{"id": sid, "command": "echo $A $PWD"}, &sh)
	if sh.Data.Output != "kept /tmp\n" || sh.Data.ExitCode == nil || *sh.Data.ExitCode != 0 {
		t.Fatalf("/v1/shell: %+v", sh.Data)
	}
	var bash env[struct {
		Status   string `json:"status"`
		Stdout   string `json:"stdout"`
		ExitCode int    `json:"exit_code"`
	}]
	d.do(ctx, http.MethodPost, "/v1/bash/exec", map[string]any{"command": "echo hi; exit 4"}, &bash)
	if bash.Data.Status != "completed" || bash.Data.Stdout != "hi\n" || bash.Data.ExitCode != 4 {
		t.Fatalf("/v1/bash: %+v", bash.Data)
	}
	var v2 env[struct {
		Stdout   string `json:"stdout"`
		ExitCode int    `json:"exit_code"`
	}]
	d.do(ctx, http.MethodPost, "/v2/code/execute", map[string]any{"language": "bash", "code": "echo $((6*7)); false"}, &v2)
	if v2.Success || v2.Data.Stdout != "42\n" || v2.Data.ExitCode != 1 {
		t.Fatalf("/v2 bash: %+v %s", v2.Data, v2.Message)
	}
	name := d.openTerminal(ctx)
	if name == "" {
		t.Fatal("no terminal name")
	}
	var list []struct {
		Name string `json:"name"`
	}
	d.do(ctx, http.MethodGet, "/api/terminals", nil, &list)
	if len(list) != 1 || list[0].Name != name {
		t.Fatalf("terminals: %+v", list)
	}
	// The terminal is left open: shutdown closes it.
}

// openTerminal opens a terminal (POST /api/terminals) and returns its
// name, "" when the answer has none.
func (d *daemon) openTerminal(ctx context.Context) string {
	var term struct {
		Name string `json:"name"`
	}
	d.do(ctx, http.MethodPost, "/api/terminals", map[string]any{}, &term)
	return term.Name
}
