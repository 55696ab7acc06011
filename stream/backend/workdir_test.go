package backend

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aiod/aiod/kernel"
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

// TestKernelsDirOfALongStateDir: a state directory too long for sockets
// under STATE/kernels gets a stand-in in the temporary folder, named after
// it: the next daemon of the same state directory empties what a killed
// one left there (kernels' folders leaked into the temporary folder
// before), and another state directory gets another.
func TestKernelsDirOfALongStateDir(t *testing.T) {
	state := filepath.Join(t.TempDir(), strings.Repeat("s", kernel.MaxConnDir))
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	dir := kernelsDir(state, log)
	t.Cleanup(func() { os.RemoveAll(dir) })
	if dir == "" || len(dir) > kernel.MaxConnDir || filepath.Dir(dir) != filepath.Clean(os.TempDir()) {
		t.Fatalf("kernelsDir of a long state directory = %q, want a short folder in %s", dir, os.TempDir())
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v %v, want mode 0700", dir, fi, err)
	}
	left := filepath.Join(dir, "aiod-kernel-1")
	if err := os.Mkdir(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if again := kernelsDir(state, log); again != dir {
		t.Fatalf("the same state directory's next daemon: %q, want %q", again, dir)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("a killed daemon's kernel folder survived the next start: %v", err)
	}
	other := filepath.Join(t.TempDir(), strings.Repeat("o", kernel.MaxConnDir))
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	od := kernelsDir(other, log)
	t.Cleanup(func() { os.RemoveAll(od) })
	if od == dir || od == "" {
		t.Fatalf("another state directory's folder %q, the first's %q", od, dir)
	}
}

// TestKernelsDirsOfGoneStateDirsSwept: a stand-in whose state directory is
// gone (its daemon killed, the folder removed) is removed by the next
// daemon that makes a stand-in, whatever its state directory; one whose
// state directory is there is kept.
func TestKernelsDirsOfGoneStateDirsSwept(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	long := func() string {
		s := filepath.Join(t.TempDir(), strings.Repeat("g", kernel.MaxConnDir))
		if err := os.Mkdir(s, 0o700); err != nil {
			t.Fatal(err)
		}
		return s
	}
	gone, kept, next := long(), long(), long()
	goneDir, keptDir := kernelsDir(gone, log), kernelsDir(kept, log)
	t.Cleanup(func() { os.RemoveAll(goneDir); os.RemoveAll(keptDir) })
	if err := os.Mkdir(filepath.Join(goneDir, "aiod-kernel-7"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
	nd := kernelsDir(next, log)
	t.Cleanup(func() { os.RemoveAll(nd) })
	if _, err := os.Stat(goneDir); !os.IsNotExist(err) {
		t.Errorf("the stand-in of a removed state directory is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(keptDir, standInOf)); err != nil {
		t.Errorf("the stand-in of a live state directory was swept: %v", err)
	}
}
