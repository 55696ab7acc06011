// Package procmem reads a process's memory as Linux accounts it in /proc.
package procmem

import (
	"os"
	"strconv"
	"strings"
)

// Rollup returns pid's resident and proportional set sizes in bytes, from
// /proc/PID/smaps_rollup; zeros when it cannot be read (the process is
// gone, or the kernel has no rollup).
func Rollup(pid int) (rss, pss int64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Rss:":
			rss = v << 10
		case "Pss:":
			pss = v << 10
		}
	}
	return rss, pss
}
