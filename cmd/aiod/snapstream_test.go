package main

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLargeSnapshotIsStreamed: a session holding 160 MiB is saved at idle
// reclaim and restored on its next call, and aiod's peak memory (VmHWM)
// grows by far less than the payload: it goes through the tenant's
// scratch folder and is streamed into and out of the sealed file, not
// passed as base64 on the kernel's stdout (627 MB peak for a 200 MiB
// value before). No scratch file is left behind.
func TestLargeSnapshotIsStreamed(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "--code-backend", "kernel", "--kernel-idle", "3")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const size = 160 << 20
	d.execute(ctx, "big", "x = b'a' * (160 << 20)", 120)
	before := peakRSS(t, d)
	for deadline := time.Now().Add(2 * time.Minute); sessionState(ctx, d, "big") != "saved"; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the session was not saved within 2 minutes of idling: %q", sessionState(ctx, d, "big"))
		}
	}
	if grew := peakRSS(t, d) - before; grew > 48<<20 {
		t.Errorf("saving a %d MiB snapshot raised aiod's peak memory by %d MiB", size>>20, grew>>20)
	}
	before = peakRSS(t, d)
	var env envelope[map[string]any]
	d.do(ctx, http.MethodPost, "/v2/code/execute", map[string]any{"language": "python", "session_id": "big", "timeout": 120,
		"code": "import glob\nprint(len(x), x[:3], glob.glob('/tmp/.aiod-*'))"}, &env)
	if env.Data["restored"] != true || env.Data["stdout"] != strconv.Itoa(size)+" b'aaa' []\n" {
		t.Fatalf("after the restore: %v %v", env.Message, env.Data)
	}
	if grew := peakRSS(t, d) - before; grew > 48<<20 {
		t.Errorf("restoring a %d MiB snapshot raised aiod's peak memory by %d MiB", size>>20, grew>>20)
	}
}

// peakRSS is aiod's peak resident memory so far (VmHWM), in bytes.
func peakRSS(t *testing.T, d *daemon) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(d.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in aiod's status")
	return 0
}

// sessionState is the state GET /v2/code/sessions lists for sid.
func sessionState(ctx context.Context, d *daemon, sid string) string {
	var env envelope[struct {
		Sessions []struct {
			SessionID string `json:"session_id"`
			State     string `json:"state"`
		} `json:"sessions"`
	}]
	d.do(ctx, http.MethodGet, "/v2/code/sessions", nil, &env)
	for _, s := range env.Data.Sessions {
		if s.SessionID == sid {
			return s.State
		}
	}
	return ""
}
