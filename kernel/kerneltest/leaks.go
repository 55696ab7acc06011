package kerneltest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Run runs a package's tests (m.Run) and then fails the run when they left
// a child process or a goroutine behind: the one leak check every package
// that starts processes or goroutines uses from its TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(kerneltest.Run(m)) }
//
// after runs once the tests are done, before the checks (to close what the
// tests shared). Processes and goroutines on their way out get a few
// seconds. Goroutines of fasthttp's date updater and of idle HTTP client
// connections are not leaks. The result is the exit code.
func Run(m *testing.M, after ...func()) int {
	quickRaceExit()
	before := goleak.IgnoreCurrent()
	code := m.Run()
	for _, f := range after {
		f()
	}
	if code != 0 {
		return code
	}
	if kids := LiveChildren(5 * time.Second); len(kids) > 0 {
		fmt.Fprintf(os.Stderr, "leaked child processes: %s\n", strings.Join(kids, ", "))
		return 1
	}
	if left := LeftCgroups(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "runtime cgroups left behind: %s\n", strings.Join(left, ", "))
		return 1
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := goleak.Find(before,
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		)
		if err == nil {
			return 0
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
}

// LeftCgroups returns the runtime cgroups (stream/backend/isolate's
// "aiod-PID" folders under this process's own cgroup, in the memory and
// pids controllers) left by this process or by an aiod that has exited,
// after a short wait for background closes. Empty folders of an aiod that
// was killed before it could clean up are removed, not reported: the next
// aiod would remove them too. A folder that still holds processes is a leak.
func LeftCgroups() []string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := leftCgroups()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func leftCgroups() []string {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	var left []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || (f[1] != "memory" && f[1] != "pids") {
			continue
		}
		own := filepath.Join("/sys/fs/cgroup", f[1], f[2])
		ents, _ := os.ReadDir(own)
		for _, e := range ents {
			pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "aiod-"))
			if !e.IsDir() || !strings.HasPrefix(e.Name(), "aiod-") || err != nil {
				continue
			}
			dir := filepath.Join(own, e.Name())
			if pid != os.Getpid() && syscall.Kill(pid, 0) == nil {
				continue // a live aiod (another test's, or another package's)
			}
			subs, _ := os.ReadDir(dir)
			var busy []string
			for _, sub := range subs {
				if !sub.IsDir() {
					continue
				}
				procs, _ := os.ReadFile(filepath.Join(dir, sub.Name(), "cgroup.procs"))
				if n := len(strings.Fields(string(procs))); n > 0 {
					busy = append(busy, fmt.Sprintf("%s/%s (%d processes)", dir, sub.Name(), n))
				} else if pid == os.Getpid() {
					busy = append(busy, filepath.Join(dir, sub.Name()))
				} else {
					_ = os.Remove(filepath.Join(dir, sub.Name()))
				}
			}
			left = append(left, busy...)
			if len(busy) == 0 && pid != os.Getpid() {
				_ = os.Remove(dir)
			}
		}
	}
	return left
}

// quickRaceExit keeps the processes a test starts from this binary (the
// sandbox's re-executed helpers, which the race detector instruments as
// it does the test) from sleeping at exit: the race runtime waits a second
// in every exit (its atexit_sleep_ms), which was a second in every tenant
// daemon's start (its sandbox probe) and in every file plane helper's end.
// A GORACE that sets atexit_sleep_ms itself is left alone.
func quickRaceExit() {
	g := os.Getenv("GORACE")
	if strings.Contains(g, "atexit_sleep_ms") {
		return
	}
	os.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0")) //nolint:errcheck // a valid name
}
