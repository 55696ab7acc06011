package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
)

// TestShutdownHooksRunAtStop: hooks registered through /v1/sandbox/hooks
// run when aiod stops, as the tenant, in its sandbox (a marker written in
// its HOME is there after a restart), by priority; a failing one and one
// past its timeout are logged and the stop goes on; the hooks themselves
// are kept across the restart, where one is removed (issue 42).
func TestShutdownHooksRunAtStop(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	uids := kerneltest.UIDRangeFlag(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d := startDaemon(t, "--state-dir", state, "--tenant-uids", uids)
	for _, h := range []map[string]any{
		{"name": "second", "command": "echo second >> ~/hook-marker", "priority": 20},
		{"name": "first", "command": "echo first-$(id -u) > ~/hook-marker", "priority": 10},
		{"name": "fails", "command": "exit 3", "priority": 10},
		{"name": "slow", "command": "sleep 60", "timeout": 1, "priority": 30},
	} {
		var env envelope[map[string]any]
		d.do(ctx, http.MethodPost, "/v1/sandbox/hooks", h, &env)
		if !env.Success {
			t.Fatalf("register %v: %s", h, env.Message)
		}
	}
	uid := strings.TrimSpace(d.execute(ctx, "", "import os; print(os.getuid())", 60).Stdout)
	d.stop()
	log := d.stderr.String()
	for _, want := range []string{`msg="hook ran" tenant=default hook=first`, `msg="hook ran" tenant=default hook=second`,
		`msg="hook failed" tenant=default hook=fails`, `msg="hook failed" tenant=default hook=slow`} {
		if !strings.Contains(log, want) {
			t.Errorf("the stop's log has no %q:\n%s", want, grepLines(log, "hook"))
		}
	}

	again := startDaemon(t, "--state-dir", state, "--tenant-uids", uids)
	if got := again.execute(ctx, "", "import os; print(open(os.path.expanduser('~/hook-marker')).read(), end='')", 60).Stdout; got != "first-"+uid+"\nsecond\n" {
		t.Errorf("the marker the hooks wrote at the stop: %q, want first (as uid %s) then second", got, uid)
	}
	var list envelope[[]map[string]any]
	again.do(ctx, http.MethodGet, "/v1/sandbox/hooks", nil, &list)
	if len(list.Data) != 4 {
		t.Errorf("hooks after the restart: %v", list.Data)
	}
	var gone envelope[any]
	again.do(ctx, http.MethodDelete, "/v1/sandbox/hooks/slow", nil, &gone)
	again.do(ctx, http.MethodGet, "/v1/sandbox/hooks", nil, &list)
	if len(list.Data) != 3 || !gone.Success {
		t.Errorf("hooks after removing one: %v", list.Data)
	}
}
