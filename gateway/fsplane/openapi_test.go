package fsplane

import (
	"net/http"
	"testing"

	"github.com/aiod/aiod/gateway/openapi/openapitest"
)

// checkAnswer validates one answer of the file plane's tests against
// openapi.json (env.do calls it for every request).
func checkAnswer(t testing.TB, req *http.Request, resp *http.Response, body []byte) {
	t.Helper()
	d, err := openapitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Check(req, resp.StatusCode, resp.Header, body); err != nil {
		t.Errorf("%v\nbody: %.600s", err, body)
	}
}
