package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A sealed file reads back; any changed byte, a file sealed with another
// key, or a header moved onto another payload is refused; the key is
// made 0600 once and kept.
func TestSealedFiles(t *testing.T) {
	dir := t.TempDir()
	key, err := loadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, keyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	again, err := loadKey(dir)
	if err != nil || string(again) != string(key) {
		t.Fatalf("the key changed on a second load: %v", err)
	}
	info := &Info{SnapshotID: newID(time.Now()), Tenant: "t", Language: "python", SessionID: "s", Saved: []string{"x"}, Skipped: map[string]string{}}
	payload := []byte("a pickle, as far as this test knows")
	path := filepath.Join(dir, "s", "one"+fileExtension)
	if err := writeFile(key, path, info, payload); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file mode %v", st.Mode())
	}
	got, p, err := readFile(key, path, 1<<20)
	if err != nil || string(p) != string(payload) || got.SessionID != "s" {
		t.Fatalf("read back: %v %q %+v", err, p, got)
	}
	if h, _, err := readHeader(key, path); err != nil || h.SnapshotID != info.SnapshotID {
		t.Fatalf("header: %v %+v", err, h)
	}
	b, _ := os.ReadFile(path)
	for _, i := range []int{0, len(magic) + 2, len(magic) + 10, len(b) - 40, len(b) - 1} {
		c := append([]byte(nil), b...)
		c[i] ^= 1
		bad := filepath.Join(dir, "bad")
		if err := os.WriteFile(bad, c, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, p, err := readFile(key, bad, 1<<20); !errors.Is(err, ErrTampered) || p != nil {
			t.Errorf("byte %d changed: %v, payload %q", i, err, p)
		}
	}
	for _, n := range []int{len(b) - 1, len(b) - 40, len(magic) + 3, 0} {
		bad := filepath.Join(dir, "short")
		if err := os.WriteFile(bad, b[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		if _, p, err := readFile(key, bad, 1<<20); !errors.Is(err, ErrTampered) || p != nil {
			t.Errorf("cut to %d bytes: %v, payload %q", n, err, p)
		}
	}
	if err := writeFileFrom(key, filepath.Join(dir, "cut"+fileExtension), info, strings.NewReader("short"), 10); err == nil {
		t.Error("a payload shorter than its length was sealed")
	}
	other := make([]byte, keySize)
	if _, _, err := readFile(other, path, 1<<20); !errors.Is(err, ErrTampered) {
		t.Errorf("another key: %v", err)
	}
	if _, _, err := readHeader(other, path); !errors.Is(err, ErrTampered) {
		t.Errorf("another key, header: %v", err)
	}
	if _, _, err := readFile(key, path, 4); err == nil {
		t.Error("a file over the limit was read")
	}
}
