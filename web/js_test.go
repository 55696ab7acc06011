package web

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The page's JavaScript has two kinds of tests: unit tests of its pure
// parts (jstest/, node's test runner) here, and the browser tests of the
// whole page in headless Chromium (e2e/run.js, driven by
// gateway/e2e/web_test.go).

// TestJSUnit runs jstest/*.test.js: the ANSI converter on the cases it
// shares with the daemon (testdata/ansi.json), and the notebook's nbformat
// reading, writing and storage bounds.
func TestJSUnit(t *testing.T) {
	node := needNode(t)
	files, err := filepath.Glob(filepath.Join("jstest", "*.test.js"))
	if err != nil || len(files) < 2 {
		t.Fatalf("jstest/*.test.js: %v %v", files, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, append([]string{"--test", "--test-reporter=tap"}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("node --test %s: %v\n%s", strings.Join(files, " "), err, out)
	}
	if !strings.Contains(string(out), "# fail 0") {
		t.Fatalf("node --test: no summary line\n%s", out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "# pass") {
			t.Log(l)
		}
	}
}

// TestVendorBundleIsCurrent rebuilds static/vendor/ from vendor/'s lock
// file and fails when the committed files differ: the bundle is committed
// so that the daemon needs no build step, and this keeps it honest.
func TestVendorBundleIsCurrent(t *testing.T) {
	node := needNode(t)
	npmCI(t, "vendor", "esbuild")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, filepath.Join("vendor", "build.mjs"), "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("node vendor/build.mjs --check: %v\n%s\nrebuild the bundle with: make vendor", err, out)
	}
	t.Log(strings.TrimSpace(string(out)))
}

func needNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("the page's JavaScript tests need Node.js: %v\ninstall it with: apt-get install -y nodejs npm (make test does it through .ci/deps.sh test)", err)
	}
	return node
}

var npmMu sync.Mutex

// npmCI installs dir's npm packages from its lock file unless pkg is there.
func npmCI(t *testing.T, dir, pkg string) {
	t.Helper()
	npmMu.Lock()
	defer npmMu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err == nil {
		return
	}
	args := []string{"ci", "--prefix", dir, "--no-audit", "--no-fund", "--ignore-scripts"}
	t.Logf("%s/node_modules is missing: running npm %s", dir, strings.Join(args, " "))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "npm", args...).CombinedOutput(); err != nil {
		t.Fatalf("npm %s: %v\n%s\ninstall them with: npm ci --prefix web/%s --no-audit --no-fund --ignore-scripts", strings.Join(args, " "), err, out, dir)
	}
}
