package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
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
	return ts.killTenantProcesses(ts.used, "killing processes of a tenant uid left by a daemon that did not stop")
}

// killTenantProcesses kills every process that runs as a uid of used (the
// uids this state directory gave tenants, with their folders), wherever it is: outside every cgroup, in
// a session of its own, reparented to init. At aiod's stop (Close) that is
// what its runtimes' groups did not end (the rlimit fallback has no group),
// so nothing of a tenant outlives aiod. It logs each uid found with why,
// waits up to 5 s for them to go and returns how many it found.
func (ts *Tenants) killTenantProcesses(used map[uint32]string, why string) int {
	procs := processesOf(func(uid uint32) bool { _, ok := used[uid]; return ok })
	n := 0
	for uid, pids := range procs {
		n += len(pids)
		ts.log.Warn(why, "uid", uid, "tenant_dir", used[uid], "pids", pids)
	}
	for deadline := time.Now().Add(5 * time.Second); len(procs) > 0; time.Sleep(10 * time.Millisecond) {
		for uid := range procs {
			if err := killAllAs(uid); err != nil {
				ts.log.Warn("kill the processes of a tenant uid", "uid", uid, "err", err)
			}
		}
		procs = processesOf(func(uid uint32) bool { _, ok := procs[uid]; return ok })
		if time.Now().After(deadline) {
			for uid, pids := range procs {
				ts.log.Error("processes of a tenant uid still run after 5 s of kills", "uid", uid, "pids", pids)
			}
			break
		}
	}
	return n
}

// killAllAs sends SIGKILL to every process that runs as uid: kill(-1)
// sent by a shell with uid's credentials, which the kernel delivers to all
// of them in one pass of its process list. A fork loop cannot outrun it as
// it outruns a listing of /proc followed by kills pid by pid, and a pid
// reused by another user's process in between is never hit. It is a child
// process, not a thread of aiod's with uid's credentials: the credentials
// of a process's main thread are what the kernel checks when another
// process signals or traces it, and no thread of aiod may ever have them.
func killAllAs(uid uint32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// dash's kill: a pid of -1 is every process the shell may signal but
	// itself; "No such process" when none is left.
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "kill -9 -1 2>/dev/null; exit 0")
	cmd.Dir, cmd.Env = "/", []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kill the processes of uid %d: %w %s", uid, err, bytes.TrimSpace(out))
	}
	return nil
}

// Processes is the live processes that run as t's uid, wherever they are.
func (t *Tenant) Processes() []int {
	return processesOf(func(uid uint32) bool { return uid == t.UID })[t.UID]
}
