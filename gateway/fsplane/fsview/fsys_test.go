package fsview

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOSRootEscapeIsRecognised: HostFS knows os.Root's refusal by its text;
// this fails if a Go release changes it.
func TestOSRootEscapeIsRecognised(t *testing.T) {
	dir := t.TempDir()
	os.Symlink("/etc", filepath.Join(dir, "abs"))
	os.Symlink("../..", filepath.Join(dir, "up"))
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, name := range []string{"abs/hostname", "up/x", "../x"} {
		if _, err := r.Stat(name); !isEscape(err) {
			t.Errorf("Stat(%q) = %v, not recognised as leaving the root", name, err)
		}
	}
	if _, err := r.Stat("missing"); isEscape(err) {
		t.Errorf("a missing file is no escape")
	}
}
