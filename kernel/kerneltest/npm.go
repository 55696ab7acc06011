package kerneltest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// NodeModules returns dir (made absolute) once its node_modules holds each
// of packages, running npm ci there first when one is missing (make test
// installs them already, through .ci/deps.sh). Test binaries of several
// packages run at once and may share dir: a lock file held around the check
// and the install keeps two npm runs out of one folder.
func NodeModules(t testing.TB, dir string, packages ...string) string {
	t.Helper()
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(dir))
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "aiod-test-npm-"+hex.EncodeToString(sum[:8])+".lock"), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close() // and the lock with it
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	missing := false
	for _, p := range packages {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", p, "package.json")); err != nil {
			missing = true
		}
	}
	if !missing {
		return dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"ci", "--prefix", dir, "--no-audit", "--no-fund", "--ignore-scripts"}
	t.Logf("%s lacks some of %v: running npm %v", filepath.Join(dir, "node_modules"), packages, args)
	if out, err := exec.CommandContext(ctx, "npm", args...).CombinedOutput(); err != nil {
		t.Fatalf("npm %v: %v\n%s\n(make test installs the tests' npm packages through .ci/deps.sh test)", args, err, out)
	}
	return dir
}
