package kerneltest

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// WalkthroughDir is the folder the seed walkthrough (examples/) writes to,
// as the page has it; tests in several packages run it.
const WalkthroughDir = "/tmp/analysis"

// LockWalkthrough gives the test the walkthrough's folder to itself until
// it ends: test binaries of different packages run at the same time and
// would otherwise write, chown and remove /tmp/analysis under each other.
// It takes an exclusive flock on a file beside it, waiting up to 15 min (a
// browser test run three times over holds it that long), and removes the
// folder so that the test starts from nothing.
func LockWalkthrough(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(WalkthroughDir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Minute)
	for waited := false; ; waited = true {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if err != syscall.EWOULDBLOCK || time.Now().After(deadline) {
			f.Close()
			t.Fatalf("lock %s: %v", f.Name(), err)
		}
		if !waited {
			t.Logf("waiting for %s: another test binary runs the walkthrough", f.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
	_ = os.RemoveAll(WalkthroughDir)
}
