package snapshot

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestScratchRefusesWhatUserCodeCouldPlant: the payload file aiod reads
// from a runtime's scratch folder is refused when it is a link (to a file
// of aiod's), a fifo, another user's file or over the limit; a regular
// file of the runtime user's is read. A file aiod makes there is new, the
// runtime user's and 0600; remove takes a link away, not its target.
func TestScratchRefusesWhatUserCodeCouldPlant(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("aiod's own"), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := &Scratch{View: "/tmp", Host: dir, UID: 4242, GID: 4242}
	plant := func(name string, make func(p string) error) {
		t.Helper()
		if err := make(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	plant("link", func(p string) error { return os.Symlink(secret, p) })
	plant("fifo", func(p string) error { return syscall.Mkfifo(p, 0o600) })
	plant("root", func(p string) error { return os.WriteFile(p, []byte("x"), 0o600) })
	for _, name := range []string{"big", "ok"} {
		plant(name, func(p string) error {
			if err := os.WriteFile(p, []byte(strings.Repeat("x", 10)), 0o600); err != nil {
				return err
			}
			return os.Chown(p, 4242, 4242)
		})
	}
	for name, limit := range map[string]int64{"link": 100, "fifo": 100, "root": 100, "big": 9} {
		if f, _, err := sc.open(name, limit); err == nil {
			f.Close()
			t.Errorf("%s was opened", name)
		}
	}
	f, n, err := sc.open("ok", 100)
	if err != nil || n != 10 {
		t.Fatalf("the runtime user's file: %d %v", n, err)
	}
	f.Close()

	w, err := sc.create("made")
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	st, err := os.Stat(filepath.Join(dir, "made"))
	if err != nil || st.Mode().Perm() != 0o600 || st.Sys().(*syscall.Stat_t).Uid != 4242 {
		t.Fatalf("made: %v %v", st, err)
	}
	if _, err := sc.create("made"); err == nil {
		t.Error("create over an existing file")
	}
	if _, err := sc.create("link"); err == nil {
		t.Error("create through a planted link")
	}
	if err := sc.remove("link"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "aiod's own" {
		t.Errorf("the link's target after remove: %q %v", b, err)
	}
	if err := sc.remove("gone"); err != nil {
		t.Errorf("remove of nothing: %v", err)
	}
	if got := sc.viewPath(scratchName("snapshot")); !strings.HasPrefix(got, "/tmp/.aiod-snapshot-") || len(got) != len("/tmp/.aiod-snapshot-")+32 {
		t.Errorf("scratch name %q", got)
	}
}
