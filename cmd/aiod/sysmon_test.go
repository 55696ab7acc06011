package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/cmd/aiod/sysmon"
)

// environOf returns the environment a process was started with.
func environOf(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range bytes.Split(b, []byte{0}) {
		if len(kv) > 0 {
			out = append(out, string(kv))
		}
	}
	return out
}

func lookup(env []string, key string) (string, bool) {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v, true
		}
	}
	return "", false
}

// The daemon runs with Go's monitor thread kept awake (it restarted itself
// with the trace setting, keeping the caller's GODEBUG), still serves,
// and is left alone when AIO_SYSMON_AWAKE=0 says so.
func TestSysmonKeptAwake(t *testing.T) {
	t.Parallel()
	d := startDaemonEnv(t, []string{"GODEBUG=madvdontneed=1"}, "--code-backend", "kernel")
	env := environOf(t, d.cmd.Process.Pid)
	if got, _ := lookup(env, "GODEBUG"); got != "madvdontneed=1,"+sysmon.SchedtraceMax {
		t.Errorf("GODEBUG of the running daemon = %q, want the caller's and %s", got, sysmon.SchedtraceMax)
	}
	if got, _ := lookup(env, sysmon.GodebugWasEnv); got != "=madvdontneed=1" {
		t.Errorf("%s = %q, want =madvdontneed=1", sysmon.GodebugWasEnv, got)
	}
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", d.cmd.Process.Pid)); err != nil || string(comm) != filepath.Base(daemonBin)+"\n" {
		t.Errorf("process name after the restart = %q (%v), want %s", comm, err, filepath.Base(daemonBin))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if a := d.run(ctx, "python", "", "print(6*7)", 60); a.Data.Stdout != "42\n" {
		t.Errorf("after the restart, an execution printed %q", a.Data.Stdout)
	}

	off := startDaemonEnv(t, []string{"AIO_SYSMON_AWAKE=0"}, "--code-backend", "kernel")
	env = environOf(t, off.cmd.Process.Pid)
	if got, _ := lookup(env, "GODEBUG"); strings.Contains(got, "schedtrace") {
		t.Errorf("with AIO_SYSMON_AWAKE=0, GODEBUG = %q", got)
	}
	if _, ok := lookup(env, sysmon.GodebugWasEnv); ok {
		t.Errorf("with AIO_SYSMON_AWAKE=0 the daemon restarted itself")
	}
}

// After the restart the caller's GODEBUG is back (set or unset) for what
// aiod starts, and the carrier variable is gone.
func TestSysmonRestoresGODEBUG(t *testing.T) {
	t.Setenv("GODEBUG", "madvdontneed=1,"+sysmon.SchedtraceMax)
	t.Setenv(sysmon.GodebugWasEnv, "=madvdontneed=1")
	sysmon.KeepAwake()
	if got := os.Getenv("GODEBUG"); got != "madvdontneed=1" {
		t.Errorf("GODEBUG = %q, want madvdontneed=1", got)
	}
	if _, ok := os.LookupEnv(sysmon.GodebugWasEnv); ok {
		t.Errorf("%s still set", sysmon.GodebugWasEnv)
	}

	t.Setenv("GODEBUG", sysmon.SchedtraceMax)
	t.Setenv(sysmon.GodebugWasEnv, "unset")
	sysmon.KeepAwake()
	if v, ok := os.LookupEnv("GODEBUG"); ok {
		t.Errorf("GODEBUG = %q, want it unset as the caller had it", v)
	}
}
