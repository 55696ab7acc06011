package compare

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/aiod/aiod/bench/restore"
)

// Path names, as in the JSON.
const (
	Floor    = "floor"
	REST     = "aiod_rest"
	WS       = "aiod_ws"
	Jupyter  = "jupyter_server"
	PyCold   = "python_cold"
	PyWarm   = "python_prewarm"
	JSCold   = "js_cold"
	JSWarm   = "js_prewarm"
	PyProc   = "python_process"
	NodeProc = "node_process"
)

var pathLabel = map[string]string{
	Floor: "floor (ipykernel over zmq4)", REST: "aiod REST", WS: "aiod WebSocket", Jupyter: "Jupyter Server",
	PyCold: "one-shot python, cold", PyWarm: "one-shot python, AIO_KERNEL_PREWARM=2",
	JSCold: "one-shot javascript, cold", JSWarm: "one-shot javascript, AIO_CODE_PREWARM=2",
	PyProc: "`python3 -c` process", NodeProc: "`node -e` process",
}

// Machine is where the run happened.
type Machine struct {
	Cores    int    `json:"cores"`
	CPUModel string `json:"cpu_model"`
	Kernel   string `json:"kernel"`
	OS       string `json:"os,omitempty"`
	Go       string `json:"go"`
	MemoryMB int    `json:"memory_mb,omitempty"`
	LoadAvg  string `json:"load_avg_at_start,omitempty"` // the machine may be shared
	LoadEnd  string `json:"load_avg_at_end,omitempty"`
}

// Settings says how the run was made; quick mode's shortcuts are here.
type Settings struct {
	Code              string  `json:"code"`
	SequentialRounds  int     `json:"sequential_rounds"`
	Interleaving      string  `json:"interleaving"`
	ConcurrentSeconds float64 `json:"concurrent_seconds_per_run"`
	ConcurrentRepeats int     `json:"concurrent_repeats"`
	KernelsC16        int     `json:"kernels_c16"` // kernels (floor) / sessions (aiod) behind the 16 streams
	KernelsC64        int     `json:"kernels_c64"`
	StreamsPerKernel  struct {
		C16 int `json:"c16"`
		C64 int `json:"c64"`
	} `json:"streams_per_kernel"`
	JupyterKernelsC16  int    `json:"jupyter_server_kernels_c16"`
	JupyterStreamsPerK int    `json:"jupyter_server_streams_per_kernel"`
	OneshotCalls       int    `json:"oneshot_calls"`
	PrewarmKernelWarm  bool   `json:"prewarm_kernel_warmup"` // AIO_KERNEL_WARMUP in the prewarm daemon
	IPythonHistory     string `json:"ipython_history"`
	FloorKernel        string `json:"floor_kernel"`
	RSSSessions        string `json:"rss_sessions"`
	RSSFlood           string `json:"rss_flood"`
	RestoreRows        []int  `json:"restore_rows,omitempty"` // the restore phase's sizes (none: not run)
}

// Goal is one of issue 6's targets, checked.
type Goal struct {
	Name   string   `json:"name"`
	Value  *float64 `json:"value"`
	Op     string   `json:"op"` // "<=", ">=" or "<"
	Target float64  `json:"target"`
	Met    bool     `json:"met"`
}

// goal is the goal name: v op target, met or not (nil v: not met).
func goal(name string, v *float64, op string, target float64) Goal {
	g := Goal{Name: name, Value: v, Op: op, Target: target}
	if v != nil {
		g.Met = (op == "<=" && *v <= target) || (op == ">=" && *v >= target) || (op == "<" && *v < target)
	}
	return g
}

// goalCell is the table's cell for the goal name ("" when there is none).
func (r *Result) goalCell(name string) string {
	for _, g := range r.Goals {
		if g.Name == name {
			mark := "MISSED"
			if g.Met {
				mark = "met"
			}
			return fmt.Sprintf("%s %.4g: %s", g.Op, g.Target, mark)
		}
	}
	return ""
}

// Result is the whole run. The maps hold one key per path, null when the
// path failed (see Failures).
type Result struct {
	Mode     string   `json:"mode"` // quick or full
	Date     string   `json:"date"`
	Seconds  float64  `json:"seconds"`
	Machine  Machine  `json:"machine"`
	Settings Settings `json:"settings"`

	ExecP50       map[string]*float64 `json:"exec_p50_ms"`
	ExecP90       map[string]*float64 `json:"exec_p90_ms"`
	ExecP99       map[string]*float64 `json:"exec_p99_ms"`
	ThroughputC16 map[string]*float64 `json:"throughput_c16"`
	ThroughputC64 map[string]*float64 `json:"throughput_c64"`
	ConcP50C16    map[string]*float64 `json:"c16_p50_ms"`
	ConcP50C64    map[string]*float64 `json:"c64_p50_ms"`
	OneshotP50    map[string]*float64 `json:"oneshot_p50_ms"`
	RSSMB         map[string]*float64 `json:"rss_mb"`
	Ratios        map[string]*float64 `json:"ratios"`
	Goals         []Goal              `json:"goals"`
	// FloodStdoutBytes is how much of the 100 MiB print the answer kept.
	FloodStdoutBytes int `json:"flood_stdout_bytes_kept"`

	// Runs holds every measured run by "seq/PATH", "c16/PATH", "c64/PATH"
	// or "oneshot/PATH".
	Runs     map[string]*Summary `json:"runs"`
	RSS      map[string]float64  `json:"-"` // filled by the run, copied into RSSMB
	Failures map[string]string   `json:"failures,omitempty"`
	// Hop is what one loopback round trip to aiod costs on this machine,
	// measured after the sequential rounds; nil when it could not be.
	Hop *Hop `json:"hop_us,omitempty"`
	// Start is the kernel start benchmark (fork against spawn); nil when
	// it was not run.
	Start *StartResult `json:"start,omitempty"`
	// Restores is the snapshot and restore phase; nil when it was not run.
	Restores *restore.Result `json:"restores,omitempty"`
	Notes    []string        `json:"notes,omitempty"`
}

// Hop is the p50 of a GET /healthz round trip to the main daemon, in µs:
// back to back, and after IdleMs of sleep before each, which is how a
// sequential call finds aiod and its client. A REST call wakes aiod twice
// more than the floor's call wakes anyone (at the request and at the
// kernel's answer), about one such round trip after idle; on a virtual
// machine whose idle processors halt, the idle one is the one that counts.
type Hop struct {
	BackToBack float64 `json:"back_to_back"`
	AfterIdle  float64 `json:"after_idle"`
	IdleMs     float64 `json:"idle_ms"`
}

func newResult() *Result {
	return &Result{Runs: map[string]*Summary{}, RSS: map[string]float64{}, Failures: map[string]string{}}
}

func num(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	v = math.Round(v*1000) / 1000
	return &v
}

// fail records that a run could not be measured.
func (r *Result) fail(run string, err error) {
	r.Failures[run] = err.Error()
	r.Runs[run] = &Summary{Err: err.Error()}
}

// derive fills the JSON maps, the ratios and the goals from Runs and RSS.
func (r *Result) derive() {
	get := func(run string, f func(*Summary) float64) *float64 {
		s := r.Runs[run]
		if !s.ok() {
			return nil
		}
		return num(f(s))
	}
	p50 := func(s *Summary) float64 { return s.P50 }
	p90 := func(s *Summary) float64 { return s.P90 }
	p99 := func(s *Summary) float64 { return s.P99 }
	rate := func(s *Summary) float64 { return s.PerSecond }
	fill := func(prefix string, paths []string, f func(*Summary) float64) map[string]*float64 {
		m := map[string]*float64{}
		for _, p := range paths {
			m[p] = get(prefix+"/"+p, f)
		}
		return m
	}
	four := []string{Floor, REST, WS, Jupyter}
	three := []string{Floor, REST, WS}
	r.ExecP50 = fill("seq", four, p50)
	r.ExecP90 = fill("seq", four, p90)
	r.ExecP99 = fill("seq", four, p99)
	r.ThroughputC16 = fill("c16", four, rate)
	r.ThroughputC64 = fill("c64", three, rate)
	r.ConcP50C16 = fill("c16", four, p50)
	r.ConcP50C64 = fill("c64", three, p50)
	r.OneshotP50 = fill("oneshot", []string{PyCold, PyWarm, JSCold, JSWarm, PyProc, NodeProc}, p50)
	r.RSSMB = map[string]*float64{"idle_100_sessions": nil, "flood_100mb": nil}
	for k, v := range r.RSS {
		r.RSSMB[k] = num(v)
	}
	div := func(a, b *float64) *float64 {
		if a == nil || b == nil || *b == 0 {
			return nil
		}
		return num(*a / *b)
	}
	r.Ratios = map[string]*float64{
		"rest_over_floor":                         div(r.ExecP50[REST], r.ExecP50[Floor]),
		"ws_over_floor":                           div(r.ExecP50[WS], r.ExecP50[Floor]),
		"jupyter_server_over_rest":                div(r.ExecP50[Jupyter], r.ExecP50[REST]),
		"throughput_rest_over_floor_c64":          div(r.ThroughputC64[REST], r.ThroughputC64[Floor]),
		"throughput_ws_over_floor_c64":            div(r.ThroughputC64[WS], r.ThroughputC64[Floor]),
		"throughput_rest_over_floor_c16":          div(r.ThroughputC16[REST], r.ThroughputC16[Floor]),
		"throughput_rest_over_jupyter_server_c16": div(r.ThroughputC16[REST], r.ThroughputC16[Jupyter]),
		"python_prewarm_over_session":             div(r.OneshotP50[PyWarm], r.ExecP50[REST]),
		"js_prewarm_over_node_process":            div(r.OneshotP50[JSWarm], r.OneshotP50[NodeProc]),
		"js_cold_over_node_process":               div(r.OneshotP50[JSCold], r.OneshotP50[NodeProc]),
		"python_cold_over_process":                div(r.OneshotP50[PyCold], r.OneshotP50[PyProc]),
	}
	defer func() { r.Goals = append(r.Goals, r.restoreGoals()...) }()
	defer r.deriveStart()
	if len(r.Runs) == 0 {
		return // the start benchmark alone
	}
	// The goals the issues set (issue 43 asked for these, not looser ones).
	r.Goals = []Goal{
		goal("ratios.rest_over_floor", r.Ratios["rest_over_floor"], "<=", 1.05),
		goal("ratios.ws_over_floor", r.Ratios["ws_over_floor"], "<=", 1.05),
		goal("ratios.jupyter_server_over_rest", r.Ratios["jupyter_server_over_rest"], ">=", 6),
		goal("ratios.throughput_rest_over_floor_c16", r.Ratios["throughput_rest_over_floor_c16"], ">=", 0.95),
		goal("ratios.throughput_rest_over_floor_c64", r.Ratios["throughput_rest_over_floor_c64"], ">=", 0.95),
		goal("ratios.throughput_ws_over_floor_c64", r.Ratios["throughput_ws_over_floor_c64"], ">=", 0.95),
		goal("ratios.python_prewarm_over_session", r.Ratios["python_prewarm_over_session"], "<=", 1.2),
		goal("ratios.js_prewarm_over_node_process", r.Ratios["js_prewarm_over_node_process"], "<=", 0.2),
		goal("rss_mb.idle_100_sessions", r.RSSMB["idle_100_sessions"], "<=", 40),
		goal("rss_mb.flood_100mb", r.RSSMB["flood_100mb"], "<=", 150),
	}
}

// WriteTable prints the tables: every number, the ratios and the goals.
func (r *Result) WriteTable(w io.Writer) {
	if len(r.Runs) > 0 {
		r.writeMainTable(w)
	} else {
		fmt.Fprintf(w, "aiobench compare, %s mode, %s: %d cores (%s), Linux %s, %s, load average %s at start, %s at the end; %.0f s\n",
			r.Mode, r.Date, r.Machine.Cores, r.Machine.CPUModel, r.Machine.Kernel, r.Machine.Go, r.Machine.LoadAvg, r.Machine.LoadEnd, r.Seconds)
	}
	r.writeStartTable(w)
	r.writeRestoreTable(w)
	r.writeFailures(w)
}

func (r *Result) writeMainTable(w io.Writer) {
	s := r.Settings
	fmt.Fprintf(w, "aiobench compare, %s mode, %s: %d cores (%s), Linux %s, %s, load average %s at start, %s at the end; %.0f s\n",
		r.Mode, r.Date, r.Machine.Cores, r.Machine.CPUModel, r.Machine.Kernel, r.Machine.Go, r.Machine.LoadAvg, r.Machine.LoadEnd, r.Seconds)
	fmt.Fprintf(w, "code: %q (the token is checked in every answer); sequential: %d rounds, %s\n", s.Code, s.SequentialRounds, s.Interleaving)
	fmt.Fprintf(w, "c16: 16 streams over %d kernels/sessions (%d per kernel); c64: 64 streams over %d (%d per kernel); Jupyter Server c16: %d kernels (%d streams each); %.1f s per concurrent run x %d\n",
		s.KernelsC16, s.StreamsPerKernel.C16, s.KernelsC64, s.StreamsPerKernel.C64, s.JupyterKernelsC16, s.JupyterStreamsPerK, s.ConcurrentSeconds, s.ConcurrentRepeats)
	if s.FloorKernel != "" {
		fmt.Fprintf(w, "floor kernels: %s\n", s.FloorKernel)
	}
	fmt.Fprintf(w, "one-shots: %d calls each; prewarm daemon AIO_KERNEL_WARMUP=%v; RSS: %s; flood: %s\n\n", s.OneshotCalls, s.PrewarmKernelWarm, s.RSSSessions, s.RSSFlood)

	rows := [][]string{{"measurement", "floor", "aiod REST", "aiod WS", "Jupyter Server", "ratio", "goal"}}
	cell := func(v *float64, unit string) string {
		if v == nil {
			return "FAILED"
		}
		switch {
		case unit == "/s":
			return fmt.Sprintf("%.0f/s", *v)
		case *v >= 100:
			return fmt.Sprintf("%.0f %s", *v, unit)
		}
		return fmt.Sprintf("%.2f %s", *v, unit)
	}
	ratio := func(name, label string) string {
		v := r.Ratios[name]
		if v == nil {
			return label + " FAILED"
		}
		return fmt.Sprintf("%s %.2f", label, *v)
	}
	na := "-"
	row4 := func(label string, m map[string]*float64, unit string, hasJ bool) []string {
		j := na
		if hasJ {
			j = cell(m[Jupyter], unit)
		}
		return []string{label, cell(m[Floor], unit), cell(m[REST], unit), cell(m[WS], unit), j}
	}
	rows = append(rows,
		append(row4("exec p50, sequential", r.ExecP50, "ms", true), ratio("rest_over_floor", "REST/floor"), r.goalCell("ratios.rest_over_floor")),
		[]string{"", "", "", "", "", ratio("ws_over_floor", "WS/floor"), r.goalCell("ratios.ws_over_floor")},
		[]string{"", "", "", "", "", ratio("jupyter_server_over_rest", "Jupyter/REST"), r.goalCell("ratios.jupyter_server_over_rest")},
		append(row4("exec p90, sequential", r.ExecP90, "ms", true), "", ""),
		append(row4("exec p99, sequential", r.ExecP99, "ms", true), "", ""),
		append(row4("exec/s at c16", r.ThroughputC16, "/s", true), ratio("throughput_rest_over_floor_c16", "REST/floor"), ""),
		[]string{"", "", "", "", "", ratio("throughput_rest_over_jupyter_server_c16", "REST/Jupyter"), ""},
		append(row4("p50 at c16", r.ConcP50C16, "ms", true), "", ""),
		append(row4("exec/s at c64", r.ThroughputC64, "/s", false), ratio("throughput_rest_over_floor_c64", "REST/floor"), r.goalCell("ratios.throughput_rest_over_floor_c64")),
		[]string{"", "", "", "", "", ratio("throughput_ws_over_floor_c64", "WS/floor"), ""},
		append(row4("p50 at c64", r.ConcP50C64, "ms", false), "", ""),
	)
	one := func(label, key, ratioName, ratioLabel, goalName string) []string {
		rt := ""
		if ratioName != "" {
			rt = ratio(ratioName, ratioLabel)
		}
		return []string{label + " p50", "", cell(r.OneshotP50[key], "ms"), "", "", rt, r.goalCell(goalName)}
	}
	rows = append(rows,
		one(pathLabel[PyCold], PyCold, "python_cold_over_process", "cold/python3 -c", ""),
		one(pathLabel[PyWarm], PyWarm, "python_prewarm_over_session", "prewarm/session exec", "ratios.python_prewarm_over_session"),
		one(pathLabel[PyProc], PyProc, "", "", ""),
		one(pathLabel[JSCold], JSCold, "js_cold_over_node_process", "cold/node -e", ""),
		one(pathLabel[JSWarm], JSWarm, "js_prewarm_over_node_process", "prewarm/node -e", "ratios.js_prewarm_over_node_process"),
		one(pathLabel[NodeProc], NodeProc, "", "", ""),
		[]string{"aiod RSS, idle, no sessions", "", cell(r.RSSMB["idle_start"], "MiB"), "", "", "", ""},
		[]string{"aiod RSS, idle, 100 sessions", "", cell(r.RSSMB["idle_100_sessions"], "MiB"), "", "", "", r.goalCell("rss_mb.idle_100_sessions")},
		[]string{"aiod RSS, peak in 100 MB print", "", cell(r.RSSMB["flood_100mb"], "MiB"), "", "", "", r.goalCell("rss_mb.flood_100mb")},
	)
	writeMarkdown(w, rows)
}

func (r *Result) writeFailures(w io.Writer) {
	if len(r.Failures) > 0 {
		keys := make([]string, 0, len(r.Failures))
		for k := range r.Failures {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintln(w)
		for _, k := range keys {
			fmt.Fprintf(w, "FAILED %s: %s\n", k, r.Failures[k])
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// writeMarkdown prints rows as an aligned Markdown table (first row: header).
func writeMarkdown(w io.Writer, rows [][]string) {
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], len(c))
		}
	}
	line := func(row []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range row {
			if i == 0 {
				fmt.Fprintf(&b, " %-*s |", width[i], c)
			} else {
				fmt.Fprintf(&b, " %*s |", width[i], c)
			}
		}
		fmt.Fprintln(w, b.String())
	}
	line(rows[0])
	sep := make([]string, len(width))
	for i, n := range width {
		if i == 0 {
			sep[i] = strings.Repeat("-", n)
		} else {
			sep[i] = strings.Repeat("-", n-1) + ":"
		}
	}
	var b strings.Builder
	b.WriteString("|")
	for _, s := range sep {
		b.WriteString(" " + s + " |")
	}
	fmt.Fprintln(w, b.String())
	for _, row := range rows[1:] {
		line(row)
	}
}
