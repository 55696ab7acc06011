package isolate

import (
	"fmt"
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
//	own/aiod-PID/daemon/     aiod's own process: weight 1024
//	own/aiod-PID/runtimes/   all runtimes: weight 1024 × RuntimesCPUWeight
//	own/aiod-PID/runtimes/N  one runtime, default weight (and its quota)
//
// When both want more than there is, the runtimes together get
// RuntimesCPUWeight parts for aiod's one, however many threads either
// runs; what one side leaves idle the other takes.

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

// daemonCPUShares is aiod's own weight inside its folder: one ordinary
// task's.
const daemonCPUShares = 1024

// weighCPU makes the daemon/ and runtimes/ groups under top (aiod-PID in
// the cpu controller, under own), moves this process into daemon/ and
// returns runtimes/, the parent of the runtimes' cpu groups.
func weighCPU(own, top string, weight int) (string, error) {
	daemonCPU.mu.Lock()
	defer daemonCPU.mu.Unlock()
	rt := filepath.Join(top, "runtimes")
	if daemonCPU.users > 0 {
		if daemonCPU.top != top {
			return "", fmt.Errorf("aiod's process is already weighed in %s", daemonCPU.top)
		}
		daemonCPU.users++
		return rt, writeShares(rt, weight*daemonCPUShares)
	}
	dmn := filepath.Join(top, "daemon")
	for _, d := range []string{dmn, rt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	if err := writeShares(dmn, daemonCPUShares); err != nil {
		return "", err
	}
	if err := writeShares(rt, weight*daemonCPUShares); err != nil {
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
