package guard

import (
	"strings"
	"testing"
	"time"
)

// A forwarded caller is taken only as signed: for the request it was
// signed for, within the clock's skew, by a replica holding the same
// secret; a guard without a secret takes none.
func TestForwardedCallerIsSigned(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	a, _ := New(Config{Token: "t", Now: clock})
	b, _ := New(Config{Token: "t", Now: clock})
	other, _ := New(Config{Token: "t", Now: clock})
	none, _ := New(Config{Token: "t", Now: clock})
	a.SetClusterSecret([]byte("the cluster's shared secret"))
	b.SetClusterSecret([]byte("the cluster's shared secret"))
	other.SetClusterSecret([]byte("another cluster's secret!!"))
	alice := Caller{Method: "jwt", Subject: "alice"}
	v := a.SignForwarded(alice, "10.0.0.1:18091", []byte("POST"), []byte("/v2/code/execute"))

	c, from, why := b.verifyForwarded([]byte(v), []byte("POST"), []byte("/v2/code/execute"))
	if why != "" || c != alice || from != "10.0.0.1:18091" {
		t.Fatalf("a good claim: %+v from %q, refused %q", c, from, why)
	}
	for _, tc := range []struct {
		name         string
		g            *Guard
		value        string
		method, uri  string
		at           time.Time
		wantInReason string
	}{
		{"another request", b, v, "GET", "/v2/code/sessions", now, "another request"},
		{"another secret", other, v, "POST", "/v2/code/execute", now, "not signed"},
		{"no cluster", none, v, "POST", "/v2/code/execute", now, "not in a cluster"},
		{"too old", b, v, "POST", "/v2/code/execute", now.Add(2 * time.Minute), "clock"},
		{"changed subject", b, strings.Replace(v, v[:4], "eyJt", 1) + "x", "POST", "/v2/code/execute", now, "not signed"},
		{"no signature", b, strings.Split(v, ".")[0], "POST", "/v2/code/execute", now, "not signed"},
	} {
		then := tc.at
		tc.g.clock = func() time.Time { return then }
		if c, _, why := tc.g.verifyForwarded([]byte(tc.value), []byte(tc.method), []byte(tc.uri)); !strings.Contains(why, tc.wantInReason) {
			t.Errorf("%s: caller %+v, reason %q (want it to say %q)", tc.name, c, why, tc.wantInReason)
		}
		tc.g.clock = clock
	}
}
