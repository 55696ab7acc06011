package sandbox

import (
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// processesOf lists the live processes (not zombies) that any of uids runs
// as: real, effective, saved or file-system uid, read from /proc.
func processesOf(uids func(uint32) bool) map[uint32][]int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := map[uint32][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue // gone
		}
		var ids []uint32
		zombie := false
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "State:"); ok {
				zombie = strings.HasPrefix(strings.TrimSpace(v), "Z")
			}
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				for _, f := range strings.Fields(v) {
					if n, err := strconv.ParseUint(f, 10, 32); err == nil {
						ids = append(ids, uint32(n))
					}
				}
			}
		}
		if zombie {
			continue
		}
		for _, id := range ids {
			if uids(id) {
				out[id] = append(out[id], pid)
				break
			}
		}
	}
	return out
}

// killLeftovers kills the processes of the uids this daemon's state
// directory gave its tenants (used), left by a daemon of the same range that
// did not stop cleanly: the range's lock says none is live, so they are
// nobody's now. It waits up to 5 s for them to go and returns how many it
// found.
func (ts *Tenants) killLeftovers() int {
	procs := processesOf(func(uid uint32) bool { _, ok := ts.used[uid]; return ok })
	n := 0
	for uid, pids := range procs {
		n += len(pids)
		ts.log.Warn("killing processes of a tenant uid left by a daemon that did not stop", "uid", uid, "tenant_dir", ts.used[uid], "pids", pids)
		for _, p := range pids {
			_ = unix.Kill(p, unix.SIGKILL)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); n > 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if len(processesOf(func(uid uint32) bool { _, ok := procs[uid]; return ok })) == 0 {
			break
		}
	}
	return n
}

// Processes is the live processes that run as t's uid, wherever they are.
func (t *Tenant) Processes() []int {
	return processesOf(func(uid uint32) bool { return uid == t.UID })[t.UID]
}
