package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
)

// TestObservationOutlivesTheDaemon: on the real daemon under tenant
// isolation (issue 42), an observation sees a process the tenant's code
// started in a session of its own (setsid), as the tenant's; at aiod's
// stop it ends with a report (reason shutdown) that the next daemon
// lists with its samples; a run file a daemon left behind (killed, not
// stopped) becomes a report (reason interrupted) at the next start.
func TestObservationOutlivesTheDaemon(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	uids := kerneltest.UIDRangeFlag(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	d := startDaemon(t, "--state-dir", state, "--tenant-uids", uids)
	pid := strings.TrimSpace(d.execute(ctx, "obs", `
import subprocess, time
p = subprocess.Popen(["setsid", "sleep", "600"])
while open(f"/proc/{p.pid}/comm").read().strip() != "sleep":  # its exec done
    time.sleep(0.01)
print(p.pid)`, 60).Stdout)
	var start envelope[map[string]any]
	d.do(ctx, http.MethodPost, "/v1/sandbox/observe/start", map[string]any{"interval_seconds": 0.25}, &start)
	id, _ := start.Data["session_id"].(string)
	if id == "" {
		t.Fatalf("start: %v", start)
	}
	var live envelope[map[string]any]
	d.do(ctx, http.MethodGet, "/v1/sandbox/observe/live?top_rows=100", nil, &live)
	found := false
	for _, p := range live.Data["top_processes"].([]any) {
		row := p.(map[string]any)
		if strconv.Itoa(int(row["pid"].(float64))) == pid && row["comm"] == "sleep" && row["user"] == "user" {
			found = true
		}
	}
	if live.Data["scope"] != "tenant" || !found {
		t.Fatalf("the tenant's setsid sleep (pid %s inside) is not among its processes: %v", pid, live.Data)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var st envelope[map[string]any]
		d.do(ctx, http.MethodGet, "/v1/sandbox/observe/status", nil, &st)
		if st.Data["last_sample_at"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sample: %v", st.Data)
		}
	}
	d.execute(ctx, "obs", "p.kill(); p.wait()", 60)
	d.stop()

	again := startDaemon(t, "--state-dir", state, "--tenant-uids", uids)
	var reps envelope[[]map[string]any]
	again.do(ctx, http.MethodGet, "/v1/sandbox/observe/reports", nil, &reps)
	if len(reps.Data) != 1 || reps.Data[0]["reason"] != "shutdown" || reps.Data[0]["session_id"] != id || reps.Data[0]["size_bytes"].(float64) <= 0 {
		t.Fatalf("reports after the restart: %v", reps.Data)
	}
	// A run file as a daemon killed mid-observation leaves it.
	dirs, _ := filepath.Glob(filepath.Join(state, "observe", "*"))
	if len(dirs) != 1 {
		t.Fatalf("observe folders: %v", dirs)
	}
	run := `{"type":"start","data":{"session_id":"obs-000000000001"}}` + "\n" + `{"type":"sample","data":{"mode":"capture"}}` + "\n"
	if err := os.WriteFile(filepath.Join(dirs[0], "run-obs-000000000001.jsonl"), []byte(run), 0o600); err != nil {
		t.Fatal(err)
	}
	again.stop()
	third := startDaemon(t, "--state-dir", state, "--tenant-uids", uids)
	third.do(ctx, http.MethodGet, "/v1/sandbox/observe/reports", nil, &reps)
	if len(reps.Data) != 2 || reps.Data[0]["reason"] != "interrupted" || reps.Data[0]["session_id"] != "obs-000000000001" {
		t.Fatalf("reports after a left run file: %v", reps.Data)
	}
	if left, _ := filepath.Glob(filepath.Join(dirs[0], "run-*")); len(left) != 0 {
		t.Errorf("run files left: %v", left)
	}
}
