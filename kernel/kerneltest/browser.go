package kerneltest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
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

// Node is node running args in dir as the leader of a process group of its
// own, so that a cancelled ctx kills what it started too (Chromium is its
// child); what it writes to stderr is kept in the buffer returned.
func Node(ctx context.Context, dir string, args ...string) (*exec.Cmd, *SyncBuffer) {
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	stderr := &SyncBuffer{}
	cmd.Stderr = stderr
	return cmd, stderr
}

// ResultLine is what follows "RESULT " on the last line of out that starts
// with it (the test clients under testdata print their findings so), nil
// when there is none.
func ResultLine(out []byte) []byte {
	var line []byte
	for _, l := range bytes.Split(out, []byte("\n")) {
		if r, ok := bytes.CutPrefix(l, []byte("RESULT ")); ok {
			line = r
		}
	}
	return line
}
