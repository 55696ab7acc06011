package backend

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aiod/aiod/stream/backend/sandbox"
)

// TestWorkdirProblemOnlyForTheHostsFolder: a start that failed without a
// tenant, in a working folder missing on the host, blames the folder; a
// tenant's start is left as it failed (its folder is its own, in its view:
// the CI log once blamed a host folder for a kernel template's timeout).
func TestWorkdirProblemOnlyForTheHostsFolder(t *testing.T) {
	gone := filepath.Join(t.TempDir(), "gone")
	cause := errors.New("start kernel python3: not ready within 1m0s")
	if err := workdirProblem(gone, nil, cause); !errors.Is(err, cause) || !strings.Contains(err.Error(), "(--workdir) is unusable") {
		t.Errorf("without a tenant: %v", err)
	}
	if err := workdirProblem(gone, &sandbox.Tenant{Key: "alice"}, cause); err != cause {
		t.Errorf("a tenant's start: %v, want the start's own error", err)
	}
}

// TestKernelsDirEmptiedAtStart: what a daemon killed without a stop left in
// STATE/kernels (kernels' connection folders) is gone when the next one
// starts on that state directory; the folder is private.
func TestKernelsDirEmptiedAtStart(t *testing.T) {
	state := t.TempDir()
	left := filepath.Join(state, "kernels", "aiod-kernel-1")
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "kernel.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := kernelsDir(state, slog.New(slog.DiscardHandler))
	if dir != filepath.Join(state, "kernels") {
		t.Fatalf("kernelsDir = %q", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 0 {
		t.Fatalf("STATE/kernels after a start: %v %v, want it empty", ents, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("STATE/kernels: %v %v, want mode 0700", fi, err)
	}
	// A state directory where it cannot be made: the temporary folder.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if dir := kernelsDir(file, slog.New(slog.DiscardHandler)); dir != "" {
		t.Fatalf("kernelsDir under a file = %q, want \"\"", dir)
	}
}
