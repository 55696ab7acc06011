package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// uidLocks is where daemons say which tenant uids they hand out: a file
// per range, held locked (flock) while the daemon runs. Two daemons that
// handed the same uids to different tenants would let those tenants see
// and signal each other's processes; the second is refused instead.
var uidLocks = "/run/aiod/tenant-uids"

// lockUIDs claims first..last for this process, failing when a live
// daemon holds an overlapping range.
func lockUIDs(first, last uint32) (release func(), err error) {
	if err := os.MkdirAll(uidLocks, 0o755); err != nil {
		return nil, fmt.Errorf("claim the tenant uids: %w", err)
	}
	// One claim at a time on the machine: two daemons checking at once
	// would each find the other's range free, then both lock their own.
	claim, err := os.OpenFile(filepath.Join(uidLocks, ".claim"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("claim the tenant uids: %w", err)
	}
	defer claim.Close() // and its lock with it
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := unix.Flock(int(claim.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			return nil, fmt.Errorf("claim the tenant uids (%s): %w", claim.Name(), err)
		}
	}
	ents, _ := os.ReadDir(uidLocks)
	for _, e := range ents {
		a, b, ok := parseRangeName(e.Name())
		if !ok || b < first || a > last {
			continue
		}
		if holder, held := lockHeld(filepath.Join(uidLocks, e.Name())); held {
			return nil, fmt.Errorf("aiod pid %s already hands out tenant uids %d-%d, which overlap --tenant-uids %d-%d: give each daemon on a machine its own range", holder, a, b, first, last)
		}
	}
	path := filepath.Join(uidLocks, fmt.Sprintf("%d-%d.lock", first, last))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("claim the tenant uids: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		holder, _ := lockHeld(path)
		return nil, fmt.Errorf("aiod pid %s already hands out tenant uids %d-%d: give each daemon on a machine its own --tenant-uids", holder, first, last)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		os.Remove(path)
		f.Close()
	}, nil
}

// lockHeld reports whether a live process holds the lock file path, and
// the pid it wrote there.
func lockHeld(path string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	b, _ := os.ReadFile(path)
	pid := strings.TrimSpace(string(b))
	err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return pid, true
	}
	if err == nil {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	}
	return pid, false
}

func parseRangeName(name string) (uint32, uint32, bool) {
	r, ok := strings.CutSuffix(name, ".lock")
	a, b, ok2 := strings.Cut(r, "-")
	x, err1 := strconv.ParseUint(a, 10, 32)
	y, err2 := strconv.ParseUint(b, 10, 32)
	return uint32(x), uint32(y), ok && ok2 && err1 == nil && err2 == nil
}
