package backend

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// What one live runtime costs the machine, measured on a 2-core, 24 GiB
// machine (docs/limits.md, Admission): a kernel forked from a warm
// template holds 22-26 MB of private memory (PSS) after importing pandas and
// matplotlib, a spawned kernel about 82 MB, a Node.js REPL about 45 MB. The
// costs below add headroom for the user's own data.
const (
	forkedRuntimeCost  = 48 << 20
	spawnedRuntimeCost = 96 << 20
)

// DefaultMaxSessions is the default of --max-sessions: three quarters of
// the machine's memory divided by the cost of one runtime in the kernel
// start mode (fork or spawn), between 8 and 4096.
func DefaultMaxSessions(kernelStart string) int {
	total := MemTotal()
	if total <= 0 {
		return 64
	}
	cost := int64(forkedRuntimeCost)
	if kernelStart == "spawn" {
		cost = spawnedRuntimeCost
	}
	return int(min(max(total*3/4/cost, 8), 4096))
}

// DefaultKernelPrewarm is the default of --kernel-prewarm (auto): with
// fork, 2 kernels kept ready (each costs its PSS, about 25 MB with the
// warm-up imports, and nothing while it waits: an idle kernel is not
// pinged), 1 under a session cap below 16 or on a machine of less than
// 2 GiB, and 0 under a cap below 4; with spawn none (a spawned kernel
// costs about 85 MB and a second of CPU to keep ready). maxSessions 0 is
// no cap.
func DefaultKernelPrewarm(kernelStart string, maxSessions int) int {
	if kernelStart == "spawn" || maxSessions > 0 && maxSessions < 4 {
		return 0
	}
	if maxSessions > 0 && maxSessions < 16 || MemTotal() > 0 && MemTotal() < 2<<30 {
		return 1
	}
	return 2
}

// DefaultMaxStarts is the default of --max-concurrent-starts: one start
// per core, at least 2. A kernel start is CPU-bound (about a second of CPU
// when spawned), so more at once only makes each slower.
func DefaultMaxStarts() int { return max(2, runtime.NumCPU()) }

// MemTotal is the machine's memory in bytes from /proc/meminfo; 0 when it
// cannot be read.
func MemTotal() int64 { return MemInfo("MemTotal") }

// MemInfo is the field of /proc/meminfo named name (MemTotal,
// MemAvailable, ...) in bytes; 0 when it cannot be read.
func MemInfo(name string) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
