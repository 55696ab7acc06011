package isolate

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
)

func TestMain(m *testing.M) { os.Exit(kerneltest.Run(m)) }

func TestFilterEnvKeepsAllowedAndNeverAiodSettings(t *testing.T) {
	env := []string{"PATH=/bin", "LC_ALL=C", "LCX=no", "AIO_TOKEN=T", "AIO_JWT_PUBLIC_KEY=k", "JWT_PUBLIC_KEY=k",
		"AIO_JUPYTER_TOKEN=j", "SECRET=s", "PYTHONPATH=/p", "KERNEL_USERNAME=u", "AIO_EXTRA=x"}
	got := FilterEnv(env, append(DefaultEnvAllow, "AIO_*", "JWT_PUBLIC_KEY"))
	want := []string{"PATH=/bin", "LC_ALL=C", "PYTHONPATH=/p", "KERNEL_USERNAME=u"}
	if !slices.Equal(got, want) {
		t.Fatalf("FilterEnv = %q, want %q (AIO_* and JWT_PUBLIC_KEY never pass, even when allowed)", got, want)
	}
	if got := FilterEnv(env, []string{}); len(got) != 0 {
		t.Fatalf("an empty allow list passed %q", got)
	}
}

func TestLookupUser(t *testing.T) {
	for in, want := range map[string]User{
		"nobody":      {Name: "nobody", UID: 65534, GID: 65534},
		"65534":       {Name: "nobody", UID: 65534, GID: 65534},
		"65534:100":   {Name: "nobody", UID: 65534, GID: 100},
		"4242:4243":   {Name: "4242", UID: 4242, GID: 4243},
		"daemon":      {Name: "daemon", UID: 1, GID: 1},
		"65534:65534": {Name: "nobody", UID: 65534, GID: 65534},
	} {
		got, err := LookupUser(in)
		if err != nil || got != want {
			t.Errorf("LookupUser(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"root", "0", "0:0", "no-such-user-here", "nobody:x", "1:x"} {
		if _, err := LookupUser(bad); err == nil {
			t.Errorf("LookupUser(%q) accepted", bad)
		}
	}
}

// startWaiter starts a Python process that waits for a line on stdin,
// then runs code; it returns the process and a writer to release it.
func startWaiter(t *testing.T, code string) (*exec.Cmd, *os.File, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", "import sys\nsys.stdin.readline()\n"+code)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, in.(*os.File), bufio.NewReader(out)
}

// TestRlimitFallback forces the fallback: RLIMIT_DATA makes a large
// allocation fail with MemoryError (the process lives), and the report says
// what is and is not enforced.
func TestRlimitFallback(t *testing.T) {
	is, err := New(Config{MemoryBytes: 256 << 20, Pids: 64, CPU: 1, Mechanism: Rlimit})
	if err != nil {
		t.Fatal(err)
	}
	defer is.Close()
	cmd, in, out := startWaiter(t, "try:\n    x = bytearray(512 << 20)\n    print('allocated')\nexcept MemoryError:\n    print('MemoryError')\n")
	l, err := is.Apply(cmd.Process.Pid, nil)
	if err != nil {
		t.Fatal(err)
	}
	limits, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/limits")
	if !strings.Contains(string(limits), "Max data size             268435456            268435456") {
		t.Fatalf("RLIMIT_DATA not set:\n%s", limits)
	}
	in.WriteString("go\n")
	line, _ := out.ReadString('\n')
	if line != "MemoryError\n" {
		t.Fatalf("a 512 MiB allocation under a 256 MiB RLIMIT_DATA printed %q", line)
	}
	if n := l.OOMKills(); n != 0 {
		t.Fatalf("OOMKills = %d with rlimits", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r := is.Report()
	if r.Mechanism != Rlimit || r.Fallback == "" {
		t.Fatalf("report %+v: want mechanism rlimit with the reason", r)
	}
	joined := strings.Join(r.Enforced, "\n") + "\n--\n" + strings.Join(r.NotEnforced, "\n")
	for _, want := range []string{"memory: RLIMIT_DATA", "pids: RLIMIT_NPROC does not apply to root", "cpu: no rlimit"} {
		if !strings.Contains(joined, want) {
			t.Errorf("report lacks %q:\n%s", want, joined)
		}
	}
}

// TestCgroupV1Group runs on this machine's cgroup v1 controllers: a
// process joins a group with the limits set, an OOM kill is counted, and
// Close kills what is left and removes the group; Isolator.Close removes
// the daemon's folder.
func TestCgroupV1Group(t *testing.T) {
	is, err := New(Config{MemoryBytes: 128 << 20, Pids: 32, CPU: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if is.Mechanism() != CgroupV1 {
		t.Fatalf("mechanism %q (%s); this machine has cgroup v1 memory, pids and cpu", is.Mechanism(), is.problem)
	}
	cmd, in, out := startWaiter(t, "import subprocess, sys\n"+
		"subprocess.Popen(['sleep', '300'], start_new_session=True)\n"+
		"print('started', flush=True)\n"+
		"x = bytearray(256 << 20)\nprint('survived', flush=True)\n")
	l, err := is.Apply(cmd.Process.Pid, nil)
	if err != nil {
		t.Fatal(err)
	}
	group, read := groupFiles(is, l)
	if read("memory", "memory.limit_in_bytes") != "134217728" || read("pids", "pids.max") != "32" || read("cpu", "cpu.cfs_quota_us") != "50000" {
		t.Fatalf("limits: memory %s, pids %s, cpu quota %s", read("memory", "memory.limit_in_bytes"), read("pids", "pids.max"), read("cpu", "cpu.cfs_quota_us"))
	}
	if !slices.Contains(strings.Fields(read("pids", "cgroup.procs")), strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("pid %d not in its group: %q", cmd.Process.Pid, read("pids", "cgroup.procs"))
	}
	if n := l.OOMKills(); n != 0 { // and the kept file is read anew below
		t.Fatalf("OOMKills = %d before any allocation", n)
	}
	if l.oomEvents < 0 {
		t.Fatal("no OOM notification registered on the v1 group")
	}
	if n := l.OOMKillsSoFar(); n != 0 || l.lastEvent.Load() != 0 {
		t.Fatalf("OOMKillsSoFar = %d (last event %d) before any allocation", n, l.lastEvent.Load())
	}
	in.WriteString("go\n")
	if line, _ := out.ReadString('\n'); line != "started\n" {
		t.Fatalf("child said %q", line)
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
		t.Fatalf("a 256 MiB allocation under 128 MiB ended with %v, want a kill", err)
	}
	// The notification came: the cheap read sees the kill without OOMKills
	// having been called first.
	if n := l.OOMKillsSoFar(); n != 1 || l.lastEvent.Load() == 0 {
		t.Fatalf("OOMKillsSoFar = %d after the kill (last event %d), want 1 from the notification", n, l.lastEvent.Load())
	}
	if n := l.OOMKills(); n != 1 {
		t.Fatalf("OOMKills = %d, want 1", n)
	}
	leftover := strings.Fields(read("pids", "cgroup.procs")) // the sleep, in a session of its own
	if len(leftover) != 1 {
		t.Fatalf("group holds %q, want the sleep", leftover)
	}
	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(leftover[0])
	if _, err := os.Stat("/proc/" + leftover[0] + "/status"); err == nil {
		b, _ := os.ReadFile("/proc/" + leftover[0] + "/status")
		if !strings.Contains(string(b), "State:\tZ") {
			t.Fatalf("process %d the runtime left survived Close", pid)
		}
	}
	for c, p := range is.parents {
		if _, err := os.Stat(filepath.Join(p, group)); err == nil {
			t.Errorf("%s group not removed", c)
		}
	}
	t.Logf("Close killed the leftover and removed the group in %v", time.Since(start))
	if n := l.OOMKills(); n != 1 {
		t.Fatalf("OOMKills after Close = %d, want the count kept", n)
	}
	parents := is.parents
	if err := is.Close(); err != nil {
		t.Fatal(err)
	}
	for c, p := range parents {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s: daemon folder %s not removed", c, p)
		}
	}
}

// TestCgroupV1PrepareThenJoin: Prepare makes the group with its limits
// before any process exists, ChargeFile is its memory controller's
// process list (a process moved there lands in the group's memory alone),
// ChargeHome is the one this process is in, Join puts the process in every
// controller, and Close removes it all.
func TestCgroupV1PrepareThenJoin(t *testing.T) {
	is, err := New(Config{MemoryBytes: 128 << 20, Pids: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer is.Close()
	if is.Mechanism() != CgroupV1 {
		t.Fatalf("mechanism %q (%s); this machine has cgroup v1", is.Mechanism(), is.problem)
	}
	l, err := is.Prepare(nil)
	if err != nil {
		t.Fatal(err)
	}
	group, read := groupFiles(is, l)
	if read("memory", "memory.limit_in_bytes") != "134217728" || read("pids", "pids.max") != "32" || read("memory", "cgroup.procs") != "" {
		t.Fatalf("prepared group: memory limit %q, pids.max %q, processes %q", read("memory", "memory.limit_in_bytes"), read("pids", "pids.max"), read("memory", "cgroup.procs"))
	}
	if want := filepath.Join(is.parents["memory"], group, "cgroup.procs"); l.ChargeFile() != want {
		t.Errorf("ChargeFile %q, want %q", l.ChargeFile(), want)
	}
	home, _ := os.ReadFile(is.ChargeHome())
	if !slices.Contains(strings.Fields(string(home)), strconv.Itoa(os.Getpid())) {
		t.Errorf("ChargeHome %q does not list this process", is.ChargeHome())
	}
	cmd, _, _ := startWaiter(t, "")
	pid := strconv.Itoa(cmd.Process.Pid)
	if err := os.WriteFile(l.ChargeFile(), []byte(pid), 0); err != nil {
		t.Fatal(err)
	}
	if read("memory", "cgroup.procs") != pid || read("pids", "cgroup.procs") != "" {
		t.Fatalf("after the move to ChargeFile: memory %q, pids %q", read("memory", "cgroup.procs"), read("pids", "cgroup.procs"))
	}
	if err := l.Join(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if read("pids", "cgroup.procs") != pid {
		t.Fatalf("after Join: pids %q", read("pids", "cgroup.procs"))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for c, p := range is.parents {
		if _, err := os.Stat(filepath.Join(p, group)); err == nil {
			t.Errorf("%s group not removed", c)
		}
	}
}

// groupFiles returns the name of l's group (it counts the groups made in
// this process: 1 in a first run, more with -count) and a reader of its
// files in each controller, trimmed.
func groupFiles(is *Isolator, l *Limits) (string, func(ctrl, file string) string) {
	group := filepath.Base(l.dir)
	return group, func(ctrl, file string) string {
		b, _ := os.ReadFile(filepath.Join(is.parents[ctrl], group, file))
		return strings.TrimSpace(string(b))
	}
}

// cpuGroup is the cpu controller's group of pid, from /proc.
func cpuGroup(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "cpu") {
			return f[2]
		}
	}
	t.Fatalf("no cpu controller in %s", b)
	return ""
}

// TestCgroupV1CPUWeight: with RuntimesCPUWeight the process (aiod) moves
// into daemon/ at one task's weight, a runtime's group lands under
// runtimes/ at the given multiple, the report says so, a second Isolator
// in the same process shares the layout, and the last Close moves the
// process back and removes the folder.
func TestCgroupV1CPUWeight(t *testing.T) {
	home := cpuGroup(t, os.Getpid())
	is, err := New(Config{MemoryBytes: 128 << 20, RuntimesCPUWeight: 4})
	if err != nil {
		t.Fatal(err)
	}
	top := filepath.Join("/sys/fs/cgroup/cpu", home, daemonDir(os.Getpid()))
	if is.Mechanism() != CgroupV1 || !is.cpuWeighed || is.parents["cpu"] != filepath.Join(top, "runtimes") {
		t.Fatalf("mechanism %q, weighed %v, cpu parent %q (%s)", is.Mechanism(), is.cpuWeighed, is.parents["cpu"], is.noWeight)
	}
	self := cpuGroup(t, os.Getpid())
	if self != filepath.Join(home, daemonDir(os.Getpid()), "daemon") {
		t.Fatalf("this process is in cpu group %q, want its daemon/ group", self)
	}
	// Every thread moved, not only the one that wrote cgroup.procs.
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/cgroup")
		if !strings.Contains(string(b), ":"+self+"\n") {
			t.Fatalf("thread %s stayed behind: %s", task.Name(), b)
		}
	}
	shares := func(dir string) string {
		b, _ := os.ReadFile(filepath.Join(top, dir, "cpu.shares"))
		return strings.TrimSpace(string(b))
	}
	if shares("daemon") != "1024" || shares("runtimes") != "4096" {
		t.Fatalf("cpu.shares: daemon %s, runtimes %s; want 1024 and 4096", shares("daemon"), shares("runtimes"))
	}
	if r := strings.Join(is.Report().Enforced, "\n"); !strings.Contains(r, "cpu weight: cgroup v1 cpu.shares: all runtimes together weigh 4×") {
		t.Fatalf("report: %s", r)
	}

	cmd, in, out := startWaiter(t, "print('up', flush=True)\nimport sys\nsys.stdin.readline()\n")
	l, err := is.Apply(cmd.Process.Pid, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g := cpuGroup(t, cmd.Process.Pid); !strings.HasPrefix(g, filepath.Join(home, daemonDir(os.Getpid()), "runtimes")+"/") {
		t.Fatalf("the runtime is in cpu group %q, want one under runtimes/", g)
	}
	in.WriteString("go\n")
	if line, _ := out.ReadString('\n'); line != "up\n" {
		t.Fatalf("child said %q", line)
	}

	// A second Isolator in this process shares the layout (and sets its
	// weight: below 1, aiod weighs more); closing it leaves the first's in
	// place.
	is2, err := New(Config{MemoryBytes: 128 << 20, RuntimesCPUWeight: 1.0 / 16})
	if err != nil || !is2.cpuWeighed {
		t.Fatalf("second Isolator: %v, weighed %v (%s)", err, is2 != nil && is2.cpuWeighed, is2.noWeight)
	}
	if shares("daemon") != "16384" || shares("runtimes") != "1024" {
		t.Fatalf("cpu.shares at 1/16: daemon %s, runtimes %s; want 16384 and 1024", shares("daemon"), shares("runtimes"))
	}
	if err := is2.Close(); err != nil { // the folders it shares stay: the first still uses them
		t.Fatal(err)
	}
	for c, p := range is.parents {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s: the second Isolator's Close removed the folder the first uses: %v", c, err)
		}
	}
	if g := cpuGroup(t, os.Getpid()); g != self {
		t.Fatalf("after the second Isolator let go, this process is in %q", g)
	}

	in.WriteString("go\n")
	_ = cmd.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := is.Close(); err != nil {
		t.Fatal(err)
	}
	if g := cpuGroup(t, os.Getpid()); g != home {
		t.Fatalf("after Close this process is in cpu group %q, want %q back", g, home)
	}
	if _, err := os.Stat(top); err == nil {
		t.Fatalf("%s not removed", top)
	}
}
