package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/aiod/aiod/stream"
)

// TestSessionCapsPerCaller runs JavaScript sessions (real Node REPLs)
// under --max-sessions 3 and --max-sessions-per-key 1 with JWT callers:
// each caller gets one session, a second is refused with 429, Retry-After
// and data.error_kind "admission" over REST and as a WebSocket error, and
// the global cap holds across callers.
func TestSessionCapsPerCaller(t *testing.T) {
	key := testRSAKey()
	ts := startServer(t, Config{
		Token: "s3cret", JWTPublicKey: pemOf(t, &key.PublicKey),
		Admission: stream.Admission{MaxSessions: 3, MaxSessionsPerKey: 1},
	})
	now := time.Now()
	jwtOf := func(sub string) string {
		return signJWT(t, jwt.SigningMethodRS256, key, jwt.MapClaims{"sub": sub, "exp": now.Add(time.Hour).Unix()})
	}
	alice, bob, carol := jwtOf("alice"), jwtOf("bob"), jwtOf("carol")
	run := func(tok, sid, code string) (int, http.Header, string) {
		body := `{"language":"javascript","code":"` + code + `","session_id":"` + sid + `"}`
		req, _ := http.NewRequest("POST", ts.URL+"/v2/code/execute", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := ts.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := readAllClose(t, resp)
		req.Body = io.NopCloser(strings.NewReader(body))
		checkAnswer(t, req, resp, b) // refusals too conform to openapi.json
		return resp.StatusCode, resp.Header, string(b)
	}
	if st, _, body := run(alice, "a1", "console.log(1)"); st != 200 || !strings.Contains(body, `"stdout":"1\n"`) {
		t.Fatalf("alice's first session: %d %s", st, body)
	}
	st, h, body := run(alice, "a2", "console.log(2)")
	if st != 429 || h.Get("Retry-After") == "" || !strings.Contains(body, `"error_kind":"admission"`) ||
		!strings.Contains(body, "this caller (jwt:alice) has 1 live sessions") || !strings.Contains(body, "--max-sessions-per-key 1") {
		t.Fatalf("alice's second session: %d retry %q %s", st, h.Get("Retry-After"), body)
	}
	if st, _, body := run(alice, "a1", "console.log(3)"); st != 200 {
		t.Fatalf("alice's own session at her cap: %d %s", st, body)
	}
	if st, _, body := run(bob, "b1", "console.log(4)"); st != 200 {
		t.Fatalf("bob is not alice: %d %s", st, body)
	}

	// Over the WebSocket: an error message naming the limit.
	c := dialWSAuth(t, ts, alice)
	sendJSON(t, c, map[string]any{"type": "execute", "id": "w1", "language": "javascript", "code": "1", "session_id": "a3"})
	var got wsMsg
	for got = readJSON(t, c, 30*time.Second); got.typ() != "error"; got = readJSON(t, c, 30*time.Second) {
		if got.typ() == "result" {
			t.Fatalf("a session over the cap ran: %v", got.m)
		}
	}
	if got.m["status"] != float64(429) || got.m["error_kind"] != "admission" || got.m["retry_after"] == nil ||
		!strings.Contains(got.m["message"].(string), "--max-sessions-per-key") {
		t.Fatalf("WebSocket refusal: %v", got.m)
	}

	if st, _, body := run("s3cret", "t1", "console.log(5)"); st != 200 {
		t.Fatalf("the token's session: %d %s", st, body)
	}
	st, h, body = run(carol, "c1", "console.log(6)")
	if st != 429 || h.Get("Retry-After") == "" || !strings.Contains(body, "3 sessions are live") || !strings.Contains(body, "--max-sessions 3") {
		t.Fatalf("over the global cap: %d %s", st, body)
	}
	// A delete frees the slot at once.
	if st, _, body := ts.secReq(t, "DELETE", "/v2/code/sessions/b1", "", nil, map[string]string{"Authorization": "Bearer " + bob}); st != 200 {
		t.Fatalf("delete b1: %d %s", st, body)
	}
	if st, _, body := run(carol, "c1", "console.log(7)"); st != 200 {
		t.Fatalf("after a delete: %d %s", st, body)
	}
	st, _, body = run(carol, "c1", "throw new Error('boom')")
	if st != 200 || !strings.Contains(body, `"error_kind":"exception"`) {
		t.Errorf("an exception's kind: %d %s", st, body)
	}
}
