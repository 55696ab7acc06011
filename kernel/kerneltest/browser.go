package kerneltest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Chromium checks what the browser tests need, failing the test with the
// line that installs what is missing (they are never skipped): Debian's
// Chromium (AIOD_CHROMIUM for another), Node.js, nbformat under Debian's
// Python (AIOD_SYSTEM_PYTHON; web/e2e/run.js validates the .ipynb the page
// writes with it), and web/e2e's npm packages. root is the repository's
// root as seen from the test's folder; Chromium returns it absolute.
func Chromium(t testing.TB, root string) string {
	t.Helper()
	SkipShort(t, "Chromium")
	chromium := os.Getenv("AIOD_CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("the browser tests need Debian's Chromium at %s: %v\ninstall it with: apt-get install -y chromium (make test does it through .ci/deps.sh test)", chromium, err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("the browser tests need Node.js: %v\ninstall it with: apt-get install -y nodejs npm", err)
	}
	py := os.Getenv("AIOD_SYSTEM_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	if out, err := exec.Command(py, "-c", "import nbformat, jsonschema").CombinedOutput(); err != nil {
		t.Fatalf("the browser tests validate notebooks with nbformat under %s: %v\n%s\ninstall it with: apt-get install -y python3-nbformat (make test does it through .ci/deps.sh test)", py, err, out)
	}
	root, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	NodeModules(t, filepath.Join(root, "web", "e2e"), "playwright-core")
	return root
}
