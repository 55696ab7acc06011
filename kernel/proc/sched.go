package proc

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Starvation tells a process that waits for a CPU from one that is stopped,
// stuck or gone, from what the scheduler counts for it: on a machine
// loaded far past its cores (a burst of starts beside a fork loop), a
// healthy kernel can leave a heartbeat unanswered for seconds only because
// its threads stand in the run queue, and killing it for that loses the
// caller's state. Mark takes a sample when a wait begins; Starved then
// says whether the process's threads waited for a CPU for at least a
// quarter of the time since, and it is not stopped (SIGSTOP, a tracer) or
// a zombie. Not safe for concurrent use.
type Starvation struct {
	at     time.Time
	waited time.Duration
	marked bool
}

// Mark samples pid's run-queue wait now; a failed read leaves no sample,
// and Starved then says false.
func (s *Starvation) Mark(pid int, now time.Time) {
	w, _, err := runDelay(pid)
	s.at, s.waited, s.marked = now, w, err == nil
}

// Marked says whether a sample is held; Reset drops it.
func (s *Starvation) Marked() bool { return s.marked }

// Reset drops the sample.
func (s *Starvation) Reset() { s.marked = false }

// Starved says whether pid waited for a CPU for a quarter or more of the
// time since Mark and is neither stopped nor a zombie.
func (s *Starvation) Starved(pid int, now time.Time) bool {
	if !s.marked {
		return false
	}
	w, runnable, err := runDelay(pid)
	if err != nil || !runnable {
		return false
	}
	span := now.Sub(s.at)
	return span > 0 && 4*(w-s.waited) >= span
}

// runDelay sums the time pid's threads waited in a run queue (the second
// field of /proc/PID/task/TID/schedstat, in nanoseconds), and says whether
// the process is in a state that can run: not stopped, traced, a zombie or
// dead (/proc/PID/stat's state).
func runDelay(pid int) (time.Duration, bool, error) {
	f, err := StatFields(pid)
	if err != nil {
		return 0, false, err
	}
	if len(f) == 0 || f[0] == "" {
		return 0, false, os.ErrInvalid
	}
	runnable := !strings.ContainsAny(f[0][:1], "TtZXx")
	dir := "/proc/" + strconv.Itoa(pid)
	tasks, err := filepath.Glob(dir + "/task/*/schedstat")
	if err != nil {
		return 0, false, err
	}
	var sum time.Duration
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that ended
		}
		fs := bytes.Fields(b)
		if len(fs) < 2 {
			continue
		}
		if n, err := strconv.ParseInt(string(fs[1]), 10, 64); err == nil {
			sum += time.Duration(n)
		}
	}
	return sum, runnable, nil
}

// WithStarvedTimeout is context.WithTimeoutCause for a wait on process pid
// (a kernel's start) that the machine's load may stretch: once timeout has
// passed, while pid's threads waited for a CPU for a quarter or more of
// the time since the call, the wait goes on a quarter of timeout at a
// time, up to limit in all; then ctx ends with cause.
func WithStarvedTimeout(ctx context.Context, pid int, timeout, limit time.Duration, cause error) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	began := time.Now()
	var s Starvation
	s.Mark(pid, began)
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	check := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if now := time.Now(); now.Sub(began) < limit && s.Starved(pid, now) {
			t.Reset(max(timeout/4, time.Millisecond))
			return
		}
		stopped = true
		cancel(cause)
	}
	mu.Lock()
	t = time.AfterFunc(timeout, check)
	mu.Unlock()
	return ctx, func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
		cancel(context.Canceled)
	}
}
