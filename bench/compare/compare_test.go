package compare

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/bench/restore"
	"github.com/aiod/aiod/kernel"
	"github.com/goccy/go-json"
)

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct{ p, want float64 }{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {10, 1}, {1, 1}} {
		if got := Percentile(xs, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if xs[0] != 5 {
		t.Error("Percentile sorted its input")
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("empty: want NaN")
	}
	// Nearest rank over 1..1000: p99 is the 990th value, p50 the 500th.
	var big []float64
	for i := 1000; i >= 1; i-- {
		big = append(big, float64(i))
	}
	if p := Percentile(big, 99); p != 990 {
		t.Errorf("p99 of 1..1000 = %v", p)
	}
	s := summarize(big, 2, 4)
	if s.P50 != 500 || s.P90 != 900 || s.Max != 1000 || s.PerSecond != 250 || s.Errors != 2 || !slices.IsSorted(s.Latencies) {
		t.Errorf("summary %+v", s)
	}
}

func TestPermutationsBalanceNeighbours(t *testing.T) {
	perms := permutations(4)
	if len(perms) != 24 {
		t.Fatalf("%d permutations of 4", len(perms))
	}
	seen := map[string]bool{}
	follows := map[[2]int]int{}
	for _, p := range perms {
		seen[fmt.Sprint(p)] = true
		for i := 1; i < len(p); i++ {
			follows[[2]int{p[i-1], p[i]}]++
		}
	}
	if len(seen) != 24 {
		t.Errorf("only %d distinct orders", len(seen))
	}
	for a := range 4 {
		for b := range 4 {
			if a != b && follows[[2]int{a, b}] != follows[[2]int{0, 1}] {
				t.Errorf("%d follows %d %d times, 1 follows 0 %d times", b, a, follows[[2]int{a, b}], follows[[2]int{0, 1}])
			}
		}
	}
}

// fakeResult is a result built from made-up numbers, one path failed.
func fakeResult() *Result {
	r := newResult()
	r.Mode, r.Date = "quick", "2026-11-29T10:00:00Z"
	r.Machine = machine()
	lat := func(base float64) []float64 {
		var xs []float64
		for i := range 200 {
			xs = append(xs, base*(1+float64(i%37)/40))
		}
		return xs
	}
	r.Hop = &Hop{BackToBack: 40, AfterIdle: 210, IdleMs: 6}
	r.Runs["seq/"+Floor] = summarize(lat(3), 0, 0)
	r.Runs["seq/"+REST] = summarize(lat(3.3), 0, 0)
	r.fail("seq/"+WS, errors.New("dial ws://127.0.0.1:1/v2/code/ws: 404"))
	r.Runs["seq/"+Jupyter] = summarize(lat(45), 0, 0)
	for _, p := range []string{Floor, REST, Jupyter} {
		r.Runs["c16/"+p] = summarize(lat(20), 0, 1)
	}
	r.Runs["c64/"+Floor] = summarize(lat(100), 0, 0.5)
	r.Runs["c64/"+REST] = summarize(lat(110), 0, 0.55)
	for i, p := range []string{PyCold, PyWarm, JSCold, JSWarm, PyProc, NodeProc} {
		r.Runs["oneshot/"+p] = summarize([]float64{float64(10 * (i + 1))}, 0, 0)
	}
	r.RSS["idle_start"], r.RSS["idle_100_sessions"], r.RSS["flood_100mb"] = 12, 31.5, 160
	r.derive()
	return r
}

func TestJSONKeys(t *testing.T) {
	r := fakeResult()
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"exec_p50_ms":    {Floor, REST, WS, Jupyter},
		"exec_p99_ms":    {Floor, REST, WS, Jupyter},
		"throughput_c64": {Floor, REST, WS},
		"throughput_c16": {Jupyter},
		"oneshot_p50_ms": {PyCold, PyWarm, JSCold, JSWarm, PyProc, NodeProc},
		"rss_mb":         {"idle_100_sessions", "flood_100mb"},
		"ratios":         {"rest_over_floor", "ws_over_floor", "jupyter_server_over_rest", "throughput_rest_over_floor_c64"},
		"machine":        {"cores", "cpu_model", "kernel"},
		"settings":       {"streams_per_kernel"},
		"hop_us":         {"back_to_back", "after_idle", "idle_ms"},
	}
	for group, keys := range want {
		g, ok := m[group].(map[string]any)
		if !ok {
			t.Errorf("no object %q in %s", group, raw)
			continue
		}
		for _, k := range keys {
			if _, ok := g[k]; !ok {
				t.Errorf("%s.%s missing", group, k)
			}
		}
	}
	for _, k := range []string{"mode", "date", "goals"} {
		if _, ok := m[k]; !ok {
			t.Errorf("%s missing", k)
		}
	}
	// A failed path is null, never a made-up number, and says why.
	if v := m["exec_p50_ms"].(map[string]any)[WS]; v != nil {
		t.Errorf("exec_p50_ms.aiod_ws = %v for a failed path, want null", v)
	}
	if v := m["ratios"].(map[string]any)["ws_over_floor"]; v != nil {
		t.Errorf("ratios.ws_over_floor = %v, want null", v)
	}
	if !strings.Contains(string(raw), "404") {
		t.Error("the failure's reason is not in the JSON")
	}
	if got := *r.Ratios["rest_over_floor"]; math.Abs(got-1.1) > 0.001 {
		t.Errorf("rest_over_floor %v, want 1.1", got)
	}
	if got := *r.Ratios["throughput_rest_over_floor_c64"]; math.Abs(got-(200/0.55)/(200/0.5)) > 0.001 {
		t.Errorf("throughput ratio %v", got)
	}
	goals := map[string]bool{}
	for _, g := range r.Goals {
		goals[g.Name] = g.Met
	}
	if !goals["rss_mb.idle_100_sessions"] || goals["rss_mb.flood_100mb"] || goals["ratios.ws_over_floor"] {
		t.Errorf("goals %+v", r.Goals)
	}

	var table bytes.Buffer
	r.WriteTable(&table)
	for _, s := range []string{"FAILED", "REST/floor 1.10", "31.50 MiB", "160 MiB", "<= 150: MISSED", "quick mode"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
}

func TestSVGWellFormed(t *testing.T) {
	var b bytes.Buffer
	if err := fakeResult().WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	var polylines, texts int
	var root string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, b.String())
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			switch se.Name.Local {
			case "polyline":
				polylines++
			case "text":
				texts++
			}
		}
	}
	if root != "svg" || polylines != 3 || texts < 20 {
		t.Errorf("root %q, %d curves (want 3: the WS path failed), %d texts", root, polylines, texts)
	}
	for _, s := range []string{"Jupyter Server", "aiod REST", "not measured", "log scale", "calls at or under"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("SVG lacks %q", s)
		}
	}
}

func TestRouterAndTokens(t *testing.T) {
	r := newRouter()
	p := r.add("m1")
	r.on("m1", "status", []byte(`{"execution_state":"busy"}`))
	r.on("m1", "stream", []byte(`{"name":"stdout","text":"aiobench-x-1\n"}`))
	r.on("m2", "stream", []byte(`{"name":"stdout","text":"aiobench-other\n"}`))
	r.on("m1", "stream", []byte(`{"name":"stderr","text":"noise"}`))
	r.on("m1", "execute_reply", []byte(`{"status":"ok"}`))
	select {
	case <-p.done:
		t.Fatal("done before idle")
	default:
	}
	r.on("m1", "status", []byte(`{"execution_state":"idle"}`))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	out, err := r.wait(ctx, "m1", p)
	if err != nil || checkToken(out, "aiobench-x-1") != nil {
		t.Fatalf("out %q err %v", out, err)
	}
	if checkToken("aiobench-a\naiobench-b\n", "aiobench-b") == nil {
		t.Error("another call's token passed the check")
	}
	if checkToken("aiobench-a\n", "aiobench-b") == nil {
		t.Error("a missing token passed the check")
	}
	if tokenCode("pass", "aiobench-t", "python") != "pass\nprint('aiobench-t')" || tokenCode("", "aiobench-t", "javascript") != "console.log('aiobench-t')" {
		t.Error("tokenCode")
	}
}

// TestFloorAndJupyterServer drives a real floor kernel and a real Jupyter
// Server kernel with checked calls, then stops both and checks that no
// process of the run is left.
func TestFloorAndJupyterServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := "test" + randHex(4)
	t.Cleanup(func() {
		if err := leftovers(run, 15*time.Second); err != nil {
			t.Error(err)
		}
	})
	fk, err := startFloorKernel(ctx, run, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fk.close(context.Background())
	j, err := startJupyter(ctx, run, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer j.stop()
	jk, err := j.newKernel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer jk.close()
	// The floor's kernel holds what aiod's kernels hold by default, and
	// its preload leaves nothing in the user's namespace.
	names := make([]string, len(kernel.DefaultPreload))
	for i, m := range kernel.DefaultPreload {
		names[i] = strconv.Quote(m)
	}
	probe := "import sys as _s, gc as _g\nprint(all(m in _s.modules for m in (" + strings.Join(names, ", ") + ",)), " +
		"_g.get_freeze_count() > 0, '_aiobench_preload' in globals(), 'm' in globals())"
	if out, err := fk.exec(ctx, probe); err != nil || out != "True True False False\n" {
		t.Errorf("floor kernel after its preload: %q, %v; want True True False False", out, err)
	}
	for name, c := range map[string]execConn{"floor": fk, "jupyter": jk} {
		for i := range 3 {
			if _, err := timeConn(ctx, c, fmt.Sprintf("aiobench-%s-%d", name, i)); err != nil {
				t.Fatalf("%s call %d: %v", name, i, err)
			}
		}
	}
	if len(marked(run)) < 3 { // floor kernel, server, its kernel
		t.Errorf("marked processes %v: the marker is not passed on", marked(run))
	}
}

// The restore phase's goals are issue 43's: a small session's restore at
// most 150 ms, a 100,000-row DataFrame's 500 ms, both by their p50; a size
// asked for and not measured is missed, never met.
func TestRestoreGoals(t *testing.T) {
	r := newResult()
	r.Settings.RestoreRows = []int{0, 10_000, 100_000}
	r.Restores = &restore.Result{Rounds: 3, Sizes: []restore.Size{
		{Rows: 0, SnapshotBytes: 376, SnapshotMs: []float64{30, 12, 13}, RestoreCallMs: []float64{400, 40, 35}},
		{Rows: 10_000, SnapshotBytes: 240_000, SnapshotMs: []float64{60}, RestoreCallMs: []float64{50}},
		{Rows: 100_000, SnapshotBytes: 2_490_502, SnapshotMs: []float64{180, 190, 300}, RestoreCallMs: []float64{520, 510, 90}},
	}}
	r.derive()
	goals := map[string]Goal{}
	for _, g := range r.Goals {
		goals[g.Name] = g
	}
	small, big := goals["restores.rows_0.restore_p50_ms"], goals["restores.rows_100000.restore_p50_ms"]
	if small.Value == nil || *small.Value != 40 || !small.Met {
		t.Errorf("small session's goal %+v, want p50 40 met", small)
	}
	if big.Value == nil || *big.Value != 510 || big.Met {
		t.Errorf("100,000 rows' goal %+v, want p50 510 missed", big)
	}
	if _, ok := goals["restores.rows_10000.restore_p50_ms"]; ok {
		t.Error("a goal for 10,000 rows, which no issue sets")
	}
	var table bytes.Buffer
	r.WriteTable(&table)
	for _, s := range []string{"small (no DataFrame)", "40.0 ms (35.0-400.0)", "<= 150: met", "510.0 ms (90.0-520.0)", "<= 500: MISSED", "190.0 ms"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}

	r.Restores = &restore.Result{Rounds: 3, Err: "aiod restore exited at start"}
	r.Goals = nil
	r.derive()
	n := 0
	for _, g := range r.Goals {
		if strings.HasPrefix(g.Name, "restores.") {
			n++
			if g.Met || g.Value != nil {
				t.Errorf("failed phase: goal %+v", g)
			}
		}
	}
	if n != 2 {
		t.Errorf("failed phase: %d restore goals, want 2 (missed)", n)
	}
}
