package isolate

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// The CPU weight of aiod against its runtimes (cgroup v1's cpu controller).
//
// Without it, aiod's threads sit in aiod's own cgroup, each weighing as
// much as any other task there, and all runtimes together sit in one child
// group (aiod-PID) of one task's weight. At 64 concurrent executions on two
// cores the layout below ran 13-15 % more executions a second than that
// one, and aiod spent 40 % less CPU per call (bench/README.md, eighth
// pass). Weighting only the runtimes' group
// (seventh pass) let three busy-looping sessions starve aiod, so aiod gets
// a group of its own beside theirs:
//
//	own/aiod-PID/            one task's weight against aiod's neighbours
//	own/aiod-PID/daemon/     aiod's own process (and its templates)
//	own/aiod-PID/runtimes/   all runtimes
//	own/aiod-PID/runtimes/N  one runtime, default weight (and its quota)
//
// When both want more than there is, the runtimes together get
// RuntimesCPUWeight parts for aiod's one, however many threads either
// runs; what one side leaves idle the other takes. The default, 1/16,
// puts aiod first: it is the one surface every tenant's call crosses, and
// its CPU comes from their runtimes' output, which their own groups bound.
// At 4 (aiod at a fifth of two cores) the torture's well-behaved tenant
// waited 190-200 ms a call, mostly for a goroutine of aiod's to run; at
// 1/4 and 1/16 it waited 25-36 ms, and 64 concurrent calls of one tenant
// ran 10-20 % more executions a second (bench/README.md, "aiod first").

// daemonCPU is the process-wide record of aiod's move into its own cpu
// group: several Isolators in one process (tests) share one aiod-PID
// folder, so the first that weighs moves the process and the last Close
// moves it back.
var daemonCPU struct {
	mu    sync.Mutex
	users int
	home  string // the cpu group aiod came from, to go back to
	top   string // own/aiod-PID in the cpu controller
}

// cpuShares is the cpu.shares of daemon/ and runtimes/ for a weight: the
// lighter side at one ordinary task's 1024, the other at weight times (or
// over) that, within cgroup v1's 2-262144.
func cpuShares(weight float64) (daemon, runtimes int) {
	const task, most = 1024, 262144
	if weight >= 1 {
		return task, min(int(math.Round(task*weight)), most)
	}
	return min(int(math.Round(task/weight)), most), task
}

// weighCPU makes the daemon/ and runtimes/ groups under top (aiod-PID in
// the cpu controller, under own), moves this process into daemon/ and
// returns runtimes/, the parent of the runtimes' cpu groups.
func weighCPU(own, top string, weight float64) (string, error) {
	daemonCPU.mu.Lock()
	defer daemonCPU.mu.Unlock()
	rt, dmn := filepath.Join(top, "runtimes"), filepath.Join(top, "daemon")
	ds, rs := cpuShares(weight)
	if daemonCPU.users > 0 {
		if daemonCPU.top != top {
			return "", fmt.Errorf("aiod's process is already weighed in %s", daemonCPU.top)
		}
		daemonCPU.users++
		if err := writeShares(dmn, ds); err != nil {
			return "", err
		}
		return rt, writeShares(rt, rs)
	}
	for _, d := range []string{dmn, rt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	if err := writeShares(dmn, ds); err != nil {
		return "", err
	}
	if err := writeShares(rt, rs); err != nil {
		return "", err
	}
	// Writing a process's id to a v1 cgroup.procs moves all its threads.
	if err := os.WriteFile(filepath.Join(dmn, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return "", fmt.Errorf("move aiod into %s: %w", dmn, err)
	}
	daemonCPU.users, daemonCPU.home, daemonCPU.top = 1, own, top
	return rt, nil
}

// cpuHome is own, aiod's cpu group as /proc says, or the group aiod came
// from while it sits in its daemon/ group.
func cpuHome(own string) string {
	daemonCPU.mu.Lock()
	defer daemonCPU.mu.Unlock()
	if daemonCPU.users > 0 {
		return daemonCPU.home
	}
	return own
}

func writeShares(dir string, n int) error {
	return os.WriteFile(filepath.Join(dir, "cpu.shares"), []byte(strconv.Itoa(n)), 0o644)
}

// unweighCPU undoes weighCPU for one Isolator: the last one moves aiod
// back to the group it came from and removes the folder, killing what aiod
// started that is still in daemon/ (nothing, once every runtime is closed).
// When aiod cannot move back the folder stays: removing it would kill aiod.
func unweighCPU() error {
	daemonCPU.mu.Lock()
	defer daemonCPU.mu.Unlock()
	if daemonCPU.users == 0 {
		return nil
	}
	if daemonCPU.users--; daemonCPU.users > 0 {
		return nil
	}
	home, top := daemonCPU.home, daemonCPU.top
	daemonCPU.home, daemonCPU.top = "", ""
	if err := os.WriteFile(filepath.Join(home, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fmt.Errorf("move aiod back to %s: %w", home, err)
	}
	return removeTree(top)
}
