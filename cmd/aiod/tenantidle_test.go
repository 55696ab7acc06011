package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestIdleTenantIsReleased: with --tenant-idle 1, bob, whose one-shot has
// ended, is let go (his sandbox closed, aiod_tenants one less) after his
// shutdown hook ran once, as him; alice, idle as long but with a live
// session, is kept and her hook does not run; bob's next call makes his
// sandbox anew and finds the file he wrote and the hook's marker, and
// alice's session still has its state.
func TestIdleTenantIsReleased(t *testing.T) {
	t.Parallel()
	priv, pub := tenantKey(t)
	d := startDaemonEnv(t, []string{"AIO_JWT_PUBLIC_KEY=" + pub}, "--code-backend", "kernel",
		"--tenant-idle", "1", "--kernel-prewarm", "0", "--code-prewarm", "0")
	alice := &caller{t: t, d: d, name: "alice", token: tenantJWT(t, priv, "alice")}
	bob := &caller{t: t, d: d, name: "bob", token: tenantJWT(t, priv, "bob")}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	alice.run(ctx, "python", "kept", "x = 41")
	for _, c := range []*caller{alice, bob} {
		if st, env := c.call(ctx, http.MethodPost, "/v1/sandbox/hooks", map[string]any{"name": "flush", "command": "echo released-$(id -u) >> ~/release-marker"}); st != 200 {
			t.Fatalf("%s's hook: %d %v", c.name, st, env)
		}
	}
	bob.run(ctx, "python", "", "import os; open(os.path.expanduser('~/keep.txt'), 'w').write('bob-file')")
	waitLog(t, d, "tenant released after idling", "tenant=jwt:bob", 2*time.Minute)
	if n := strings.Count(d.stderr.String(), `msg="hook ran" tenant=jwt:bob hook=flush`); n != 1 {
		t.Errorf("bob's hook ran %d times before his release, want once:\n%s", n, grepLines(d.stderr.String(), "hook"))
	}
	if strings.Contains(d.stderr.String(), "tenant=jwt:alice hook=") {
		t.Errorf("alice's hook ran while her session ran:\n%s", grepLines(d.stderr.String(), "hook"))
	}
	if strings.Contains(d.stderr.String(), "tenant=jwt:alice idle") {
		t.Fatalf("alice was let go while her session's kernel ran:\n%s", grepLines(d.stderr.String(), "released"))
	}
	if n := tenantsGauge(ctx, t, alice); n != "1" {
		t.Errorf("aiod_tenants %s once bob was let go, want 1 (alice)", n)
	}
	if got := bob.run(ctx, "python", "", "import os; print(open(os.path.expanduser('~/keep.txt')).read())"); got != "bob-file\n" {
		t.Errorf("bob's file after his sandbox was made anew: %q", got)
	}
	uid := strings.TrimSpace(bob.run(ctx, "python", "", "import os; print(os.getuid())"))
	if got := bob.run(ctx, "python", "", "import os; print(open(os.path.expanduser('~/release-marker')).read(), end='')"); got != "released-"+uid+"\n" {
		t.Errorf("the marker bob's hook wrote before his release: %q, want one line as uid %s", got, uid)
	}
	if n := tenantsGauge(ctx, t, alice); n != "2" {
		t.Errorf("aiod_tenants %s once bob called again, want 2", n)
	}
	if got := alice.run(ctx, "python", "kept", "print(x + 1)"); got != "42\n" {
		t.Errorf("alice's session after bob's release: %q", got)
	}
}

// waitLog waits until a line of d's log has every one of subs.
func waitLog(t *testing.T, d *daemon, sub, also string, within time.Duration) {
	t.Helper()
	waitLogLine(t, d, fmt.Sprintf("a log line with %q and %q", sub, also), within, func(l string) bool {
		return strings.Contains(l, sub) && strings.Contains(l, also)
	})
}

// waitLogLine waits until d has logged a line that match takes (what
// names it in the failure), failing the test after within.
func waitLogLine(t *testing.T, d *daemon, what string, within time.Duration, match func(line string) bool) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		for _, l := range strings.Split(d.stderr.String(), "\n") {
			if match(l) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s in %s:\n%s", what, within, d.stderr.String())
		}
	}
}

// tenantsGauge reads aiod_tenants from /metrics as c.
func tenantsGauge(ctx context.Context, t *testing.T, c *caller) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.d.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "aiod_tenants "); ok {
			return v
		}
	}
	t.Fatalf("no aiod_tenants in /metrics (%d):\n%s", resp.StatusCode, b)
	return ""
}
