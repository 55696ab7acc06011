package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A tenant's files move to another sandbox (another replica's, another
// uid) through ArchiveFiles and RestoreFiles: its HOME and /tmp come back
// owned by the new uid; what a link of the tenant's points at stays out of
// the archive; a bound smaller than the files refuses them.
func TestFilesArchiveMovesATenant(t *testing.T) {
	ts, _ := newTenants(t, NetworkNone)
	other, _ := newTenants(t, NetworkNone)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	alice, err := ts.Files("jwt:alice")
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"/tmp/t.txt": "in tmp", "/home/user/h.txt": "in home"} {
		f, err := alice.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteString(body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	from, _ := ts.Get("jwt:alice")
	// A link the tenant planted: archived as a link, never its target.
	if err := os.Symlink("/etc/shadow", filepath.Join(from.Dir, "tmp", "shadow")); err != nil {
		t.Fatal(err)
	}
	var tarball bytes.Buffer
	n, err := from.ArchiveFiles(ctx, &tarball, 64<<20)
	if err != nil || n != int64(tarball.Len()) {
		t.Fatalf("archive: %d bytes, %v (buffer %d)", n, err, tarball.Len())
	}
	if bytes.Contains(tarball.Bytes(), []byte("root:")) {
		t.Fatal("the archive holds /etc/shadow's text")
	}

	to, err := other.Get("jwt:alice")
	if err != nil {
		t.Fatal(err)
	}
	if to.UID == from.UID {
		t.Fatalf("both sandboxes gave alice uid %d", to.UID)
	}
	if err := to.RestoreFiles(ctx, bytes.NewReader(tarball.Bytes())); err != nil {
		t.Fatal(err)
	}
	for rel, body := range map[string]string{"tmp/t.txt": "in tmp", "home/h.txt": "in home"} {
		host := filepath.Join(to.Dir, rel)
		b, err := os.ReadFile(host)
		var st syscall.Stat_t
		if err == nil {
			err = syscall.Stat(host, &st)
		}
		if err != nil || string(b) != body || st.Uid != to.UID {
			t.Errorf("%s after the move: %q, %v, owner %d; want %q owned by %d", rel, b, err, st.Uid, body, to.UID)
		}
	}
	if target, err := os.Readlink(filepath.Join(to.Dir, "tmp", "shadow")); err != nil || target != "/etc/shadow" {
		t.Errorf("the planted link after the move: %q, %v", target, err)
	}

	if _, err := from.ArchiveFiles(ctx, &bytes.Buffer{}, 1024); !errors.Is(err, ErrArchiveTooLarge) {
		t.Errorf("an archive bound of 1 KiB: %v, want ErrArchiveTooLarge", err)
	}
}
