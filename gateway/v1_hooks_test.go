package gateway

import (
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestV1SandboxHooks: the SDK's register_hook, list_hooks and remove_hook
// (issue 42): a hook registered answers SandboxHook with the defaults,
// listed by priority; bad fields are 422 naming them; a name registered
// again is replaced; another tenant sees none and cannot remove one;
// removed, it is 404.
func TestV1SandboxHooks(t *testing.T) {
	t.Parallel()
	_, alice, bob := twoTenants(t)

	r := alice.sdkOK(t, "POST", "v1/sandbox/hooks", map[string]any{"name": "flush", "command": "sync"})
	if d := r.data(); d["name"] != "flush" || d["event"] != "shutdown" || d["timeout"] != 10.0 || d["priority"] != 100.0 || d["source"] != "api" {
		t.Fatalf("registered: %s", r.Raw)
	}
	alice.sdkOK(t, "POST", "v1/sandbox/hooks", map[string]any{"name": "first", "command": "echo 1", "priority": 5, "timeout": 2.5, "event": "shutdown"})
	alice.sdkOK(t, "POST", "v1/sandbox/hooks", map[string]any{"name": "flush", "command": "sync; sync"})
	l := alice.sdkOK(t, "GET", "v1/sandbox/hooks?event=shutdown", nil)
	list, _ := l.Body["data"].([]any)
	if len(list) != 2 || list[0].(map[string]any)["name"] != "first" || list[1].(map[string]any)["command"] != "sync; sync" {
		t.Fatalf("listed: %s", l.Raw)
	}
	for field, body := range map[string]map[string]any{
		"name":    {"name": "a b", "command": "true"},
		"command": {"name": "x", "command": " "},
		"event":   {"name": "x", "command": "true", "event": "startup"},
		"timeout": {"name": "x", "command": "true", "timeout": 600},
	} {
		alice.sdk422(t, "POST", "v1/sandbox/hooks", body, "body", field)
	}
	alice.sdk422(t, "POST", "v1/sandbox/hooks", map[string]any{"name": "x"}, "body", "command")

	if l := bob.sdkOK(t, "GET", "v1/sandbox/hooks", nil); len(l.Body["data"].([]any)) != 0 {
		t.Fatalf("bob lists alice's hooks: %s", l.Raw)
	}
	bob.sdkStatus(t, "DELETE", "v1/sandbox/hooks/flush", nil, http.StatusNotFound)
	alice.sdkOK(t, "DELETE", "v1/sandbox/hooks/flush", nil)
	alice.sdkStatus(t, "DELETE", "v1/sandbox/hooks/flush", nil, http.StatusNotFound)
	if l := alice.sdkOK(t, "GET", "v1/sandbox/hooks", nil); len(l.Body["data"].([]any)) != 1 {
		t.Fatalf("after the remove: %s", l.Raw)
	}
}

// twoTenants starts a gateway that tells callers apart by JWT, and
// returns it with the callers alice and bob.
func twoTenants(t *testing.T) (ts, alice, bob *testServer) {
	t.Helper()
	key := testRSAKey()
	ts = startServer(t, Config{JWTPublicKey: pemOf(t, &key.PublicKey)})
	exp := time.Now().Add(time.Hour).Unix()
	a, b := *ts, *ts
	a.token = signJWT(t, jwt.SigningMethodRS256, key, jwt.MapClaims{"sub": "alice", "exp": exp})
	b.token = signJWT(t, jwt.SigningMethodRS256, key, jwt.MapClaims{"sub": "bob", "exp": exp})
	return ts, &a, &b
}
