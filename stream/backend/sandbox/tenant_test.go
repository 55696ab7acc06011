package sandbox

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// ownedDir never changes what a link planted in its place points at.
func TestOwnedDirRefusesALink(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "target")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "work")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := ownedDir(link, 0o700, 4242); err == nil {
		t.Fatal("ownedDir went through a link")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(target, &st); err != nil || st.Mode&0o777 != 0o755 || st.Uid != uint32(os.Getuid()) {
		t.Fatalf("the link's target changed: mode %o uid %d (%v)", st.Mode&0o777, st.Uid, err)
	}
	dir := filepath.Join(base, "plain")
	if err := ownedDir(dir, 0o700, 4242); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(dir, &st); err != nil || st.Mode&0o777 != 0o700 || st.Uid != 4242 {
		t.Fatalf("a plain folder: mode %o uid %d (%v)", st.Mode&0o777, st.Uid, err)
	}
}
