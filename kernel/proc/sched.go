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
// says whether the process is not stopped (SIGSTOP, a tracer) or a zombie
// and either its threads waited for a CPU for at least a quarter of the
// time since, or one of them is runnable or in the kernel now while the
// machine's CPU or memory pressure (PSI "some") covered a quarter of it.
// The second rule is there because the scheduler adds a thread's wait to
// its count only when the thread gets a CPU: a heartbeat thread that has
// stood in the run queue since the ping has counted none of it yet. Not
// safe for concurrent use.
type Starvation struct {
	at       time.Time
	waited   time.Duration
	pressure time.Duration
	marked   bool
}

// Mark samples pid's run-queue wait now; a failed read leaves no sample,
// and Starved then says false.
func (s *Starvation) Mark(pid int, now time.Time) {
	w, _, _, err := runDelay(pid)
	s.at, s.waited, s.pressure, s.marked = now, w, machinePressure(), err == nil
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
	w, runnable, waiting, err := runDelay(pid)
	if err != nil || !runnable {
		return false
	}
	return starved(now.Sub(s.at), w-s.waited, machinePressure()-s.pressure, waiting)
}

// starved is Starved's rule over a span: the process's threads waited for
// a CPU for waited of it; the machine was under CPU or memory pressure for
// pressure of it; waiting says whether a thread is runnable or in the
// kernel now.
func starved(span, waited, pressure time.Duration, waiting bool) bool {
	if span <= 0 {
		return false
	}
	return 4*waited >= span || waiting && 4*pressure >= span
}

// machinePressure is the time some task of the machine has waited for a
// CPU plus the time some waited for memory (the "some" totals of
// /proc/pressure/cpu and /proc/pressure/memory); 0 without PSI.
func machinePressure() time.Duration {
	var sum time.Duration
	for _, f := range []string{"/proc/pressure/cpu", "/proc/pressure/memory"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		line, _, _ := bytes.Cut(b, []byte("\n"))
		_, total, ok := bytes.Cut(line, []byte("total="))
		if !ok || !bytes.HasPrefix(line, []byte("some ")) {
			continue
		}
		if us, err := strconv.ParseInt(string(bytes.TrimSpace(total)), 10, 64); err == nil {
			sum += time.Duration(us) * time.Microsecond
		}
	}
	return sum
}

// runDelay sums the time pid's threads waited in a run queue (the second
// field of /proc/PID/task/TID/schedstat, in nanoseconds), says whether
// the process is in a state that can run: not stopped, traced, a zombie or
// dead (/proc/PID/stat's state), and whether one of its threads is
// runnable or in the kernel (state R or D) now.
func runDelay(pid int) (sum time.Duration, runnable, waiting bool, err error) {
	t, err := schedTimes(pid)
	if err != nil {
		return 0, false, false, err
	}
	return t.wait, !strings.ContainsRune("TtZXx", rune(t.state)), t.active, nil
}

// taskSched reads a thread's /proc/PID/task/TID/schedstat: the time it
// ran on a CPU and the time it waited in a run queue; ok is false for a
// thread that ended.
func taskSched(task string) (run, wait time.Duration, ok bool) {
	b, err := os.ReadFile(task + "/schedstat")
	if err != nil {
		return 0, 0, false
	}
	fs := bytes.Fields(b)
	if len(fs) < 2 {
		return 0, 0, false
	}
	r, err1 := strconv.ParseInt(string(fs[0]), 10, 64)
	w, err2 := strconv.ParseInt(string(fs[1]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return time.Duration(r), time.Duration(w), true
}

// threadTimes is what schedTimes reads of a process's threads.
type threadTimes struct {
	run, wait time.Duration // summed over the threads: on a CPU, in a run queue
	// active says whether a thread is runnable or in the kernel (state R or
	// D) now: the scheduler adds a thread's wait to its count only once the
	// thread gets a CPU, so a thread that has stood in the run queue since
	// the last look has counted none of it yet.
	active bool
	state  byte // the main thread's state (/proc/PID/stat's third field)
}

// ended says whether the process can no longer run: a zombie, or dead.
func (t threadTimes) ended() bool { return strings.ContainsRune("ZXx", rune(t.state)) }

// schedTimes reads pid's threads' /proc/PID/task/TID/stat and schedstat,
// once each. The error is os.ErrNotExist when the process, or its main
// thread, is gone.
func schedTimes(pid int) (t threadTimes, err error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := filepath.Glob(dir + "*")
	if err != nil {
		return t, err
	}
	main := dir + strconv.Itoa(pid)
	for _, task := range tasks {
		if st, err := os.ReadFile(task + "/stat"); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) {
				if st[i+2] == 'R' || st[i+2] == 'D' {
					t.active = true
				}
				if task == main {
					t.state = st[i+2]
				}
			}
		}
		if r, w, ok := taskSched(task); ok {
			t.run += r
			t.wait += w
		}
	}
	if t.state == 0 {
		return t, os.ErrNotExist
	}
	return t, nil
}

// WithStarvedTimeout is context.WithTimeoutCause for a wait on process pid
// (a kernel's start) that the machine's load may stretch: once timeout has
// passed, while pid's threads waited for a CPU for a quarter or more of
// the time since the call, the wait goes on a quarter of timeout at a
// time, up to limit in all; then ctx ends with cause.
func WithStarvedTimeout(ctx context.Context, pid int, timeout, limit time.Duration, cause error) (context.Context, context.CancelFunc) {
	return WithQuietTimeout(ctx, pid, timeout, limit, cause, nil)
}

// WithQuietTimeout is WithStarvedTimeout for a process that shows progress
// by itself: heard, when not nil, says when pid was last heard from (a
// reply to anyone), and both timeout and limit count from then rather than
// from the call. A process that answers others in turn while this wait's
// answer is queued behind theirs is not stuck.
func WithQuietTimeout(ctx context.Context, pid int, timeout, limit time.Duration, cause error, heard func() time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	since := time.Now()
	var s Starvation
	s.Mark(pid, since)
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
		now := time.Now()
		if heard != nil {
			if h := heard(); h.After(since) {
				since = h
				s.Mark(pid, now)
			}
			if quiet := now.Sub(since); quiet < timeout {
				t.Reset(timeout - quiet)
				return
			}
		}
		if now.Sub(since) < limit && s.Starved(pid, now) {
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
