package mcp

import (
	"net/http/httptest"
	"testing"
)

// The three HTML escapes become their characters; every other escape,
// an escaped backslash before "u003c" included, is kept; an escape cut
// between two writes is joined.
func TestUnescapeWriter(t *testing.T) {
	for in, want := range map[string]string{
		`{"t":"\u003ca\u003e \u0026 b"}`:                `{"t":"<a> & b"}`,
		`{"t":"\\u003c is literal"}`:                    `{"t":"\\u003c is literal"}`,
		`{"t":"\\\u003c"}`:                              `{"t":"\\<"}`,
		`{"t":"\n\"\u00e9\u2028\U003C"}`:                `{"t":"\n\"\u00e9\u2028\U003C"}`,
		`{"t":"\u003C\u003E"}`:                          `{"t":"<>"}`,
		"event: message\ndata: {\"x\":\"\\u0026\"}\n\n": "event: message\ndata: {\"x\":\"&\"}\n\n",
	} {
		for cut := 0; cut <= len(in); cut++ {
			rec := httptest.NewRecorder()
			u := &unescapeWriter{w: rec}
			u.WriteHeader(200)
			u.Write([]byte(in[:cut]))
			u.Write([]byte(in[cut:]))
			u.close()
			if got := rec.Body.String(); got != want {
				t.Errorf("%q cut at %d: %q, want %q", in, cut, got, want)
				break
			}
		}
	}
}
