// Package sysmon keeps Go's monitor thread from parking, for aiod and for
// the benchmark that measures it against its floor (the same runtime on
// both sides of the comparison).
package sysmon

import (
	"os"
	"strings"
	"syscall"
)

// Go's monitor thread (sysmon) parks once every processor is idle, and the
// first system call after that wakes it (a futex wake) and sets it polling
// every 20 µs again. aiod goes idle and busy again several times per
// execution (it waits for each kernel message), so with the default
// runtime the park-and-wake cycle was about a quarter of aiod's CPU per
// call at 16 concurrent sessions (perf: runtime.sysmon and
// entersyscallWakeSysmon; golang/go#18236). The runtime keeps sysmon from
// parking only while a scheduler trace is on, and reads that setting
// (GODEBUG=schedtrace=MS) only when the process starts: so aiod starts
// itself again, once, with the longest period Go accepts. Then sysmon
// polls at most every 10 ms while aiod is idle instead of parking.
//
// The price: on a host up for longer than that period (about 24.8 days)
// the runtime writes one "SCHED" line to stderr when aiod starts and one
// per period after that. AIO_SYSMON_AWAKE=0 turns it off; a GODEBUG that
// sets schedtrace itself is left alone.
const (
	// AwakeEnv set to 0 turns the restart off.
	AwakeEnv = "AIO_SYSMON_AWAKE"
	// GodebugWasEnv carries the caller's GODEBUG across the restart, so
	// that aiod's runtimes get the environment aiod was given: "=" and
	// the value, or "unset".
	GodebugWasEnv = "AIOD_GODEBUG_WAS"
	// SchedtraceMax is the longest trace period Go parses (int32 ms).
	SchedtraceMax = "schedtrace=2147483647"
)

// KeepAwake restarts the process with the trace setting when it is not
// set yet, and, in the restarted process, puts the caller's GODEBUG back.
// It returns only when the program goes on in this process. Call it first
// thing in main.
func KeepAwake() {
	if was, ok := os.LookupEnv(GodebugWasEnv); ok {
		os.Unsetenv(GodebugWasEnv)
		if v, ok := strings.CutPrefix(was, "="); ok {
			os.Setenv("GODEBUG", v)
		} else {
			os.Unsetenv("GODEBUG")
		}
		return
	}
	if os.Getenv(AwakeEnv) == "0" {
		return
	}
	godebug, set := os.LookupEnv("GODEBUG")
	if strings.Contains(godebug, "schedtrace=") {
		return
	}
	was := "=" + godebug
	if !set {
		was = "unset"
	}
	env := make([]string, 0, len(os.Environ())+2)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GODEBUG=") {
			env = append(env, kv)
		}
	}
	withTrace := SchedtraceMax
	if godebug != "" {
		withTrace = godebug + "," + SchedtraceMax
	}
	env = append(env, "GODEBUG="+withTrace, GodebugWasEnv+"="+was)
	// The binary's own path, not /proc/self/exe, so that the process keeps
	// its name (ps, pgrep aiod). Exec returns only on failure: aiod then
	// runs with the default runtime.
	if exe, err := os.Executable(); err == nil {
		_ = syscall.Exec(exe, os.Args, env)
	}
}
