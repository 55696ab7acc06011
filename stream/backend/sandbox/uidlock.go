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

// claimUIDs claims first..last for this process and the state directory
// dir, failing when a live daemon holds an overlapping range; with first
// and last 0 it claims dir's own block (uidauto.go). It returns the range
// claimed, recorded in dir and reserved.
func claimUIDs(dir string, first, last uint32) (uint32, uint32, func(), error) {
	if err := os.MkdirAll(uidLocks, 0o755); err != nil {
		return 0, 0, nil, fmt.Errorf("claim the tenant uids: %w", err)
	}
	// One claim at a time on the machine: two daemons checking at once
	// would each find the other's range free, then both lock their own.
	claim, err := os.OpenFile(filepath.Join(uidLocks, ".claim"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("claim the tenant uids: %w", err)
	}
	defer claim.Close() // and its lock with it
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := unix.Flock(int(claim.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			return 0, 0, nil, fmt.Errorf("claim the tenant uids (%s): %w", claim.Name(), err)
		}
	}
	auto := first == 0 && last == 0
	if auto {
		if first, last, err = autoRange(dir, heldBy); err != nil {
			return 0, 0, nil, err
		}
	}
	if holder := heldBy(first, last); holder != "" {
		if auto {
			return 0, 0, nil, fmt.Errorf("%s, which overlap the tenant uids %d-%d that state directory %s records (%s): give one of the two daemons --tenant-uids of its own", holder, first, last, dir, uidRecordName)
		}
		return 0, 0, nil, fmt.Errorf("%s, which overlap --tenant-uids %d-%d: give each daemon on a machine its own range, or leave --tenant-uids unset and each state directory claims a block of its own", holder, first, last)
	}
	path := filepath.Join(uidLocks, fmt.Sprintf("%d-%d.lock", first, last))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("claim the tenant uids: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		holder, _ := lockHeld(path)
		return 0, 0, nil, fmt.Errorf("aiod pid %s already hands out tenant uids %d-%d: give each daemon on a machine its own --tenant-uids", holder, first, last)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	release := func() {
		os.Remove(path)
		f.Close()
	}
	if err := recordRange(dir, first, last); err != nil {
		release()
		return 0, 0, nil, err
	}
	return first, last, release, nil
}

// heldBy names the live daemon holding a range that overlaps first-last,
// as "aiod pid N already hands out tenant uids A-B"; "" when none does.
func heldBy(first, last uint32) string {
	ents, _ := os.ReadDir(uidLocks)
	for _, e := range ents {
		a, b, ok := parseRangeName(e.Name())
		if !ok || b < first || a > last {
			continue
		}
		if holder, held := lockHeld(filepath.Join(uidLocks, e.Name())); held {
			return fmt.Sprintf("aiod pid %s already hands out tenant uids %d-%d", holder, a, b)
		}
	}
	return ""
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
	if !ok {
		return 0, 0, false
	}
	return parseRange(r)
}
