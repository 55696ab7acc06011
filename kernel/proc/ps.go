package proc

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Process is one row of a process table, read from /proc.
type Process struct {
	PID, PPID  int
	UID        uint32 // real uid (ReadDetails)
	Comm       string
	State      string // one letter: R, S, D, T, Z, …
	RSSBytes   int64
	Threads    int
	FDs        int     // -1 when /proc/PID/fd cannot be read, or before ReadDetails
	CPUSeconds float64 // user and system time so far
	Started    float64 // seconds after boot
}

// ReadProcess reads pid's row from /proc/PID/stat, the one file; an error
// when it is gone.
func ReadProcess(pid int) (Process, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return Process{}, err
	}
	open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || close < open {
		return Process{}, os.ErrInvalid
	}
	f := strings.Fields(string(b[close+1:]))
	if len(f) < 22 {
		return Process{}, os.ErrInvalid
	}
	p := Process{PID: pid, Comm: string(b[open+1 : close]), State: f[0], FDs: -1}
	p.PPID, _ = strconv.Atoi(f[1])
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	p.CPUSeconds = float64(ut+st) / clockTicks
	p.Threads, _ = strconv.Atoi(f[17])
	start, _ := strconv.ParseUint(f[19], 10, 64)
	p.Started = float64(start) / clockTicks
	pages, _ := strconv.ParseInt(f[21], 10, 64)
	p.RSSBytes = pages * int64(os.Getpagesize())
	return p, nil
}

// ReadDetails adds the uid and open descriptors to a row ReadProcess
// read: two more reads, for the rows that are shown.
func (p *Process) ReadDetails() {
	dir := "/proc/" + strconv.Itoa(p.PID)
	if s, err := os.ReadFile(dir + "/status"); err == nil {
		if _, rest, ok := strings.Cut(string(s), "\nUid:"); ok {
			if fs := strings.Fields(rest); len(fs) > 0 {
				if n, err := strconv.ParseUint(fs[0], 10, 32); err == nil {
					p.UID = uint32(n)
				}
			}
		}
	}
	if fds, err := os.ReadDir(dir + "/fd"); err == nil {
		p.FDs = len(fds)
	}
}

// Uptime is the seconds since boot (/proc/uptime), 0 when unread.
func Uptime() float64 {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	up, _, _ := strings.Cut(string(b), " ")
	v, _ := strconv.ParseFloat(up, 64)
	return v
}

// Descendants is roots and every live process under them, from one scan
// of /proc's parent links.
func Descendants(roots []int) []int {
	if len(roots) == 0 {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	alive := map[int]bool{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := StatFields(pid)
		if err != nil || len(f) < 2 {
			continue
		}
		alive[pid] = true
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	seen := map[int]bool{}
	queue := append([]int(nil), roots...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] || !alive[pid] {
			continue
		}
		seen[pid] = true
		out = append(out, pid)
		queue = append(queue, children[pid]...)
	}
	return out
}
