package compare

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// markerEnv is put in the environment of every process the run starts
// (the daemons and Jupyter Server pass it on to their kernels and REPLs,
// the floor's kernels get it explicitly), so leftovers can be found.
const markerEnv = "AIOBENCH_COMPARE_RUN"

// marked lists live processes (not zombies, not this one) whose
// environment holds markerEnv=run.
func marked(run string) []int {
	want := []byte(markerEnv + "=" + run + "\x00")
	self := os.Getpid()
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append(env, 0), want) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			s := string(st)
			if i := strings.LastIndexByte(s, ')'); i > 0 {
				if f := strings.Fields(s[i+1:]); len(f) > 0 && f[0] == "Z" {
					continue
				}
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

// leftovers waits up to timeout for the run's processes to be gone, then
// kills those still there and says which they were.
func leftovers(run string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids := marked(run)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var desc []string
			for _, p := range pids {
				cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
				desc = append(desc, fmt.Sprintf("%d %.80s", p, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			return fmt.Errorf("%d processes were left behind (now killed): %s", len(pids), strings.Join(desc, "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// procStatus reads VmRSS and VmHWM of pid, in MiB.
func procStatus(pid int) (rss, hwm float64, err error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			hwm = kb / 1024
		}
	}
	return rss, hwm, nil
}

// resetHWM asks the kernel to reset pid's VmHWM to its current RSS, so a
// later peak belongs to what happened since; false when not allowed.
func resetHWM(pid int) bool {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
}

// machine describes this computer.
func machine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(raw))
	}
	if raw, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		if _, err := fmt.Sscanf(string(raw), "MemTotal: %d kB", &kb); err == nil {
			m.MemoryMB = kb / 1024
		}
	}
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(raw)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

// timeProcess runs argv, checks its stdout is want, and times it.
func timeProcess(want string, argv ...string) (float64, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	t0 := time.Now()
	out, err := cmd.Output()
	d := time.Since(t0)
	if err != nil || string(out) != want {
		return 0, fmt.Errorf("%s: stdout %.200q, want %q (%v)", argv[0], out, want, err)
	}
	return ms(d), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
