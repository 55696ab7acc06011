// Package kerneltest holds what tests that start processes (kernels,
// REPLs, daemons, Jupyter Servers) share: finding the processes a test left
// behind, and the goroutines it left running. It reads /proc, so it is for
// Linux.
package kerneltest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aiod/aiod/kernel/proc"
)

// stat returns the fields of /proc/PID/stat after the command name:
// state, ppid, pgrp, ...
func stat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	f := stat(pid)
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// Cmdline is pid's command line, arguments joined by spaces.
func Cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// pids lists every process id.
func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// Descendants returns the pids of every process below pid.
func Descendants(pid int) []int {
	children := map[int][]int{}
	for _, p := range pids() {
		if f := stat(p); len(f) > 1 {
			if pp, err := strconv.Atoi(f[1]); err == nil {
				children[pp] = append(children[pp], p)
			}
		}
	}
	var out []int
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// LiveChildren lists this process's children that are not zombies, as
// "PID command line", waiting up to wait for ones on their way out.
func LiveChildren(wait time.Duration) []string {
	self := os.Getpid()
	deadline := time.Now().Add(wait)
	for {
		var kids []string
		for _, p := range pids() {
			if f := stat(p); len(f) > 1 && f[1] == strconv.Itoa(self) && f[0] != "Z" && f[0] != "X" {
				kids = append(kids, fmt.Sprintf("%d (%s)", p, Cmdline(p)))
			}
		}
		if len(kids) == 0 || time.Now().After(deadline) {
			return kids
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SyncBuffer is a bytes.Buffer that a process's output copier and a test
// may use at once.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// SkipShort skips t in the fast layer (go test -short): it starts what (real
// kernels, REPLs, daemons, servers or a browser), which make test runs.
func SkipShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("starts %s: the fast layer (go test -short) leaves it to make test", what)
	}
}

// uidSlots is how many ranges of 1,000 tenant uids the tests share, from
// uid 1,000,000,000 on; uidSlotDir holds one lock file per slot.
const uidSlots = 900

var uidSlotDir = filepath.Join(os.TempDir(), "aiod-test-uid-slots")

// UIDRange is a range of 1,000 tenant uids that no other test holds, in
// this process or another (every package's test binary runs at once with
// go test ./...): daemons refuse to share a range, since tenants of two
// daemons would share uids. The range is the test's until it ends: a lock
// (flock) on its slot's file, which the kernel drops with the process too.
func UIDRange(t testing.TB) (first, last uint32) {
	t.Helper()
	if err := os.MkdirAll(uidSlotDir, 0o777); err != nil {
		t.Fatalf("tenant uid slots: %v", err)
	}
	start := rand.IntN(uidSlots)
	for i := range uidSlots {
		slot := (start + i) % uidSlots
		f, err := os.OpenFile(filepath.Join(uidSlotDir, strconv.Itoa(slot)), os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			t.Fatalf("tenant uid slot %d: %v", slot, err)
		}
		// The files stay: one removed under a waiting locker would let two
		// tests hold "the same" slot.
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		first = 1_000_000_000 + uint32(slot)*1000
		if daemonHolds(first, first+999) {
			f.Close() // a daemon a crashed test left behind
			continue
		}
		t.Cleanup(func() { f.Close() })
		return first, first + 999
	}
	t.Fatalf("all %d tenant uid slots are held", uidSlots)
	return 0, 0
}

// UIDRangeFlag is UIDRange as --tenant-uids takes it.
func UIDRangeFlag(t testing.TB) string {
	t.Helper()
	a, b := UIDRange(t)
	return fmt.Sprintf("%d-%d", a, b)
}

// daemonHolds reports whether a live aiod holds the range first-last: its
// lock file in /run/aiod/tenant-uids (stream/backend/sandbox) is locked.
func daemonHolds(first, last uint32) bool {
	f, err := os.Open(fmt.Sprintf("/run/aiod/tenant-uids/%d-%d.lock", first, last))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// Clock is a clock a test moves by hand (Add); its Now goes where code
// takes a clock. The zero value starts at the zero time.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock is a Clock that starts at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Ends waits up to limit for process pid (any process, not only a child)
// to end, on its pidfd; true when it did (or was gone already).
func Ends(pid int, limit time.Duration) bool {
	h := Hold(pid)
	defer h.Release()
	return h.Ends(time.Now().Add(limit))
}

// Held is a process held by its pidfd, taken while it was known to live:
// a later wait or description is of that process, even once the machine
// has given its pid to another (pid_max is 32768 here, and a loaded test
// run goes through it in minutes).
type Held struct {
	PID int
	fd  *os.File // nil: gone when held, or no pidfds here
}

// Hold takes pid's pidfd now.
func Hold(pid int) *Held { return &Held{PID: pid, fd: proc.Pidfd(pid)} }

// Ends waits until the held process has ended, up to deadline; true when
// it has. It may be called again after a false.
func (h *Held) Ends(deadline time.Time) bool {
	if h.fd == nil {
		return !Alive(h.PID)
	}
	fds := []unix.PollFd{{Fd: int32(h.fd.Fd()), Events: unix.POLLIN}}
	for {
		ms := time.Until(deadline).Milliseconds()
		if ms < 0 {
			ms = 0
		}
		n, err := unix.Poll(fds, int(ms))
		if n > 0 {
			return true
		}
		if err == nil && ms == 0 || err != nil && err != unix.EINTR {
			return false
		}
	}
}

// Release closes the pidfd.
func (h *Held) Release() {
	if h.fd != nil {
		h.fd.Close()
	}
}

// Describe says what a live process is: state, parent, command line and
// cgroups, for a failing test's message.
func Describe(pid int) string {
	f := stat(pid)
	if len(f) < 2 {
		return fmt.Sprintf("pid %d: gone", pid)
	}
	cg, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	return fmt.Sprintf("pid %d state %s ppid %s (%s) cmd %q cgroups %q", pid, f[0], f[1], Cmdline(atoiOr0(f[1])), Cmdline(pid), strings.ReplaceAll(strings.TrimSpace(string(cg)), "\n", "; "))
}

// atoiOr0 is s as a number, 0 when it is not one.
func atoiOr0(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
