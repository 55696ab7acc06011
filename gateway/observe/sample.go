package observe

import (
	"os/user"
	"sort"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aiod/aiod/kernel/proc"
	"github.com/aiod/aiod/stream/backend"
)

// The reference's ObservationLiveSnapshot and its parts. A sample of a
// capture is the same object. Fields past the reference's (scope, pids)
// are extras its models keep.

type liveSnapshot struct {
	CapturedAt   time.Time     `json:"captured_at"`
	Mode         string        `json:"mode"`
	Scope        string        `json:"scope"` // "tenant" or "sessions" (backend.SandboxReading)
	Cgroup       cgroupSnap    `json:"cgroup"`
	Disk         []diskSnap    `json:"disk"`
	TopProcesses []processSnap `json:"top_processes"`
	RecentEvents []event       `json:"recent_events"`
	// runtimes are each runtime's own usage and limits, for the guardrails.
	runtimes []backend.RuntimeUsage
}

type cgroupSnap struct {
	CPUUsagePct      *float64 `json:"cpu_usage_pct"` // of one CPU: 200 is two CPUs busy
	CPUUsageUsec     int64    `json:"cpu_usage_usec"`
	CPUNrPeriods     *int64   `json:"cpu_nr_periods"`
	CPUNrThrottled   *int64   `json:"cpu_nr_throttled"`
	CPUThrottledUsec *int64   `json:"cpu_throttled_usec"`
	MemCurrentBytes  int64    `json:"mem_current_bytes"`
	MemMaxBytes      *int64   `json:"mem_max_bytes"`
	MemUsagePct      *float64 `json:"mem_usage_pct"`
	OOM              *int64   `json:"oom"`
	OOMKill          *int64   `json:"oom_kill"`
	AnonBytes        *int64   `json:"memory_anon_bytes"`
	FileBytes        *int64   `json:"memory_file_bytes"`
	ShmemBytes       *int64   `json:"memory_shmem_bytes"`
	SlabBytes        *int64   `json:"memory_slab_bytes"`
	PidsCurrent      int64    `json:"pids_current"`
	PidsMax          *int64   `json:"pids_max"`
}

type diskSnap struct {
	Path          string   `json:"path"`
	UsedBytes     int64    `json:"used_bytes"`
	TotalBytes    int64    `json:"total_bytes"`
	FreeBytes     int64    `json:"free_bytes"`
	UsagePct      float64  `json:"usage_pct"`
	InodeUsed     *int64   `json:"inode_used"`
	InodeTotal    *int64   `json:"inode_total"`
	InodeUsagePct *float64 `json:"inode_usage_pct"`
}

type processSnap struct {
	PID       int      `json:"pid"`
	User      string   `json:"user"`
	Comm      string   `json:"comm"`
	RSSBytes  int64    `json:"rss_bytes"`
	RSSMiB    float64  `json:"rss_mib"`
	CPUPct    *float64 `json:"cpu_pct"`
	Threads   *int     `json:"threads"`
	FDs       *int     `json:"fds"`
	State     *string  `json:"state"`
	UptimeSec *float64 `json:"uptime_sec"`
	PPID      *int     `json:"ppid"`
}

type event struct {
	TS      time.Time      `json:"ts"`
	Type    string         `json:"type"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data"`
}

// maxProcs bounds the processes one reading looks at.
const maxProcs = 4096

// cpuMark is a reading's CPU times, for the next reading's percentages:
// the group's (or the processes' sum) and each process's, by pid and
// start time (a pid reused is another process).
type cpuMark struct {
	at    time.Time
	total float64 // seconds
	procs map[procKey]float64
}

type procKey struct {
	pid     int
	started float64
}

// read takes one reading of rd into a snapshot; prev (may be zero) gives
// CPU percentages over the time since it; the mark returned is the next
// reading's prev.
func read(rd backend.SandboxReading, prev cpuMark, now time.Time, topRows int, withProcs, withDisk bool) (liveSnapshot, cpuMark) {
	u := rd.Usage
	snap := liveSnapshot{CapturedAt: now.UTC(), Scope: rd.Scope, Disk: []diskSnap{}, TopProcesses: []processSnap{}, RecentEvents: []event{},
		runtimes: rd.Runtimes}
	c := &snap.Cgroup
	c.MemCurrentBytes, c.PidsCurrent = u.MemoryBytes, u.Pids
	c.CPUNrPeriods, c.CPUNrThrottled, c.CPUThrottledUsec = u.NrPeriods, u.NrThrottled, u.ThrottledUsec
	c.AnonBytes, c.FileBytes, c.ShmemBytes, c.SlabBytes, c.OOMKill = u.Anon, u.File, u.Shmem, u.Slab, u.OOMKills
	c.OOM = u.OOMKills // the kills are what a group out of memory did
	if u.MemoryLimitBytes > 0 {
		lim := u.MemoryLimitBytes
		pct := round2(100 * float64(u.MemoryBytes) / float64(lim))
		c.MemMaxBytes, c.MemUsagePct = &lim, &pct
	}
	if u.PidsLimit > 0 {
		lim := u.PidsLimit
		c.PidsMax = &lim
	}

	mark := cpuMark{at: now, procs: map[procKey]float64{}}
	uptime := proc.Uptime()
	var all []proc.Process
	for i, pid := range u.PIDs {
		if i == maxProcs {
			break
		}
		p, err := proc.ReadProcess(pid)
		if err != nil || p.State == "Z" {
			continue
		}
		mark.procs[procKey{p.PID, p.Started}] = p.CPUSeconds
		mark.total += p.CPUSeconds
		all = append(all, p)
	}
	var rows []processSnap
	if withProcs {
		// The largest by RSS, with their details read for them only.
		sort.SliceStable(all, func(i, j int) bool { return all[i].RSSBytes > all[j].RSSBytes })
		for _, p := range all[:min(len(all), topRows)] {
			p.ReadDetails()
			rows = append(rows, processRow(p, rd.Names, uptime, prev, now))
		}
	}
	if u.CPUUsec != nil {
		mark.total = float64(*u.CPUUsec) / 1e6
	}
	c.CPUUsageUsec = int64(mark.total * 1e6)
	if !prev.at.IsZero() {
		if dt := now.Sub(prev.at).Seconds(); dt > 0 {
			// Without a group's own count, a process that ended takes its
			// time with it: the change is summed over the processes seen
			// both times.
			var busy float64
			if u.CPUUsec != nil {
				busy = mark.total - prev.total
			} else {
				for k, v := range mark.procs {
					if was, ok := prev.procs[k]; ok {
						busy += v - was
					}
				}
			}
			pct := round2(100 * max(busy, 0) / dt)
			c.CPUUsagePct = &pct
		}
	}
	if rows != nil {
		snap.TopProcesses = rows
	}
	if withDisk {
		for _, d := range rd.Disks {
			if ds, ok := statDisk(d); ok {
				snap.Disk = append(snap.Disk, ds)
			}
		}
	}
	return snap, mark
}

// processRow is p's row; prev gives its CPU percentage.
func processRow(p proc.Process, names map[uint32]string, uptime float64, prev cpuMark, now time.Time) processSnap {
	row := processSnap{PID: p.PID, User: userName(p.UID, names), Comm: p.Comm, RSSBytes: p.RSSBytes,
		RSSMiB: round2(float64(p.RSSBytes) / (1 << 20))}
	threads, ppid, state := p.Threads, p.PPID, p.State
	row.Threads, row.PPID, row.State = &threads, &ppid, &state
	if p.FDs >= 0 {
		fds := p.FDs
		row.FDs = &fds
	}
	if uptime > 0 {
		up := round2(max(uptime-p.Started, 0))
		row.UptimeSec = &up
	}
	if was, ok := prev.procs[procKey{p.PID, p.Started}]; ok {
		if dt := now.Sub(prev.at).Seconds(); dt > 0 {
			pct := round2(100 * max(p.CPUSeconds-was, 0) / dt)
			row.CPUPct = &pct
		}
	}
	return row
}

// statDisk reads the file system that holds d.
func statDisk(d backend.Disk) (diskSnap, bool) {
	var st unix.Statfs_t
	if d.Host == "" || unix.Statfs(d.Host, &st) != nil || st.Blocks == 0 {
		return diskSnap{}, false
	}
	bs := int64(st.Bsize)
	total, free, avail := int64(st.Blocks)*bs, int64(st.Bfree)*bs, int64(st.Bavail)*bs
	ds := diskSnap{Path: d.Path, TotalBytes: total, FreeBytes: avail, UsedBytes: total - free}
	if seen := ds.UsedBytes + avail; seen > 0 {
		ds.UsagePct = round2(100 * float64(ds.UsedBytes) / float64(seen))
	}
	if st.Files > 0 {
		used, all := int64(st.Files-st.Ffree), int64(st.Files)
		pct := round2(100 * float64(used) / float64(all))
		ds.InodeUsed, ds.InodeTotal, ds.InodeUsagePct = &used, &all, &pct
	}
	return ds, true
}

var userNames sync.Map // uid -> name from the host's passwd

// userName names uid: the reading's names first, then the host's
// /etc/passwd, else the number.
func userName(uid uint32, names map[uint32]string) string {
	if n, ok := names[uid]; ok {
		return n
	}
	if n, ok := userNames.Load(uid); ok {
		return n.(string)
	}
	n := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(n); err == nil {
		n = u.Username
	}
	userNames.Store(uid, n)
	return n
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }
