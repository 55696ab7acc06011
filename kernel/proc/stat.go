package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// StatFields is /proc/PID/stat split after the command's name: field 0 is
// the state, 1 the parent, 2 the process group, 3 the session, 11 and 12
// utime and stime, 19 the start time (proc(5)'s fields 3 onwards). The
// name may hold spaces and parentheses, so the split starts after its last
// ")".
func StatFields(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fs := bytes.Fields(b[i+1:])
	out := make([]string, len(fs))
	for j, f := range fs {
		out[j] = string(f)
	}
	return out, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux aiod runs on.
const clockTicks = 100

// CPUSeconds is process pid's user and system CPU time so far (0 when it
// cannot be read).
func CPUSeconds(pid int) float64 {
	f, err := StatFields(pid)
	if err != nil || len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return float64(ut+st) / clockTicks
}
