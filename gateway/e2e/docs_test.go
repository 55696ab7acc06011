package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/gateway"
	"github.com/aiod/aiod/gateway/gatewaytest"
	"github.com/aiod/aiod/gateway/openapi/openapitest"
	"github.com/aiod/aiod/kernel/kerneltest"
	"github.com/goccy/go-json"
)

// TestDocsPageRenders opens /docs in headless Chromium (web/e2e/docs.js):
// every operation of the document is rendered, the filter works, and the
// page's strict CSP is never violated; nothing is fetched from elsewhere.
func TestDocsPageRenders(t *testing.T) {
	t.Parallel()
	root := kerneltest.Chromium(t, "../..")
	ts := gatewaytest.Start(t, gateway.Config{Token: "docs-token"}) // /docs is open even so
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	shot := filepath.Join(t.TempDir(), "docs.png")
	if d := os.Getenv("AIOD_SCREENSHOTS"); d != "" { // relative to the repository, as for TestWebE2E
		shot = filepath.Join(root, d, "docs.png")
	}
	cmd, stderr := kerneltest.Node(ctx, root, filepath.Join("web", "e2e", "docs.js"), ts.URL+"/docs", shot)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node web/e2e/docs.js: %v\n%s\n%s", err, out, stderr.String())
	}
	var got struct {
		Failure, Title, Version, ExecuteSchema   string
		Status, Operations, HasExecute, Filtered int
		Errors, Violations, Requests             []string
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil {
		t.Fatalf("docs.js said %q: %v", out, err)
	}
	if got.Failure != "" {
		t.Fatalf("docs.js: %s", got.Failure)
	}
	doc, err := openapitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, pi := range doc.T.Paths.Map() {
		want += len(pi.Operations())
	}
	if got.Status != 200 || got.Operations != want || got.HasExecute != 1 || got.Filtered != 7 {
		t.Fatalf("docs page: status %d, %d operations (want %d), execute %d, filtered to %d (want the 7 /v1/nodejs ones)",
			got.Status, got.Operations, want, got.HasExecute, got.Filtered)
	}
	if !strings.Contains(got.ExecuteSchema, "ExecuteRequest") || !strings.Contains(got.ExecuteSchema, "language*") {
		t.Fatalf("the execute operation's request schema is not shown: %q", got.ExecuteSchema)
	}
	if !strings.Contains(got.Version, gateway.Version) || len(got.Errors) > 0 || len(got.Violations) > 0 {
		t.Fatalf("version %q, console errors %q, CSP violations %q", got.Version, got.Errors, got.Violations)
	}
	if len(got.Requests) != 1 || got.Requests[0] != ts.URL {
		t.Fatalf("the page fetched from %v; only %s is allowed", got.Requests, ts.URL)
	}
}
