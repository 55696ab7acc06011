package compare

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/goccy/go-json"
)

// TestStartResult checks the start benchmark's JSON keys, ratios, goals
// and table on made-up numbers, alone and after the main comparison.
func TestStartResult(t *testing.T) {
	for _, alone := range []bool{true, false} {
		r := newResult()
		if !alone {
			r = fakeResult()
		}
		r.Mode = "quick, start benchmark only"
		r.Start = &StartResult{
			FirstExec: map[string]*Summary{
				ModeFork: summarize([]float64{90, 100, 110}, 0, 0), ModeSpawn: summarize([]float64{400, 500, 600}, 0, 0),
				ModeForkPrewarm: summarize([]float64{9, 10, 11}, 0, 0), ModeForkPlain: summarize([]float64{80, 90, 100}, 0, 0),
			},
			Burst: map[string]*BurstResult{ModeFork: {Sessions: 16, Answered: 16, AllSeconds: 2}, ModeSpawn: {Sessions: 16, Answered: 16, AllSeconds: 30},
				ModeForkPlain: {Sessions: 16, Answered: 16, AllSeconds: 1}},
			PSS: map[string]*PSSResult{ModeFork: {Sessions: 8, PerSessionMB: 19.5, KernelMedianMB: 22}, ModeSpawn: {Sessions: 8, PerSessionMB: 84, KernelMedianMB: 84},
				ModeForkPlain: {Sessions: 8, PerSessionMB: 18.5, KernelMedianMB: 21}},
			Tenants: &TenantsResult{
				Row: map[string]*Summary{ModeTenants: summarize([]float64{10, 12, 14}, 0, 0), ModeTenantsPlain: summarize([]float64{7, 8, 9}, 0, 0)},
				New: map[string]*Summary{ModeTenants: summarize([]float64{60, 70, 90}, 0, 0), ModeTenantsPlain: summarize([]float64{9, 10, 11}, 0, 0)},
			},
			Live: map[string]*LiveResult{
				ModeFork:  {MaxAnswering: 1200, AiodRSSMiB: 210, AiodQuietCPU: num(0.4), StoppedBy: "the cap of 1200 sessions", Steps: []LiveStep{{Sessions: 1200, PSSPerSessionMB: 21}}},
				ModeSpawn: {MaxAnswering: 250, AiodRSSMiB: 60, StoppedBy: "MemAvailable under 2048 MiB"},
			},
		}
		r.derive()
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		st, _ := m["start"].(map[string]any)
		for _, k := range []string{"settings", "first_execute", "burst", "pss", "live_sessions", "ratios"} {
			if _, ok := st[k]; !ok {
				t.Errorf("start.%s missing in %s", k, raw)
			}
		}
		if got := *r.Start.Ratios["burst_spawn_over_fork"]; math.Abs(got-15) > 1e-9 {
			t.Errorf("burst ratio %v", got)
		}
		goals := map[string]bool{}
		for _, g := range r.Goals {
			goals[g.Name] = g.Met
		}
		want := map[string]bool{
			"start.first_execute.fork.p50_ms": false, "start.ratios.burst_spawn_over_fork": true,
			"start.pss.fork.per_session_mb": true, "start.live_sessions.fork.max_answering": true,
			"start.pss.fork.kernel_median_mb": false, // 22 MB against 20
			"start.burst.fork.last_answer_s":  true,  // 2 s against 2.5
			// 12 ms against 1.3 x 8 + 10; 70 ms against 80
			"start.tenants.row.tenants.p50_ms": true, "start.tenants.new_tenant.tenants.p50_ms": true,
			"start.live_sessions.fork.aiod_rss_mib_at_max": false, "start.live_sessions.fork.aiod_quiet_cpu_percent": true,
			// isolated against plain: 100/90 ms, 2/1 s, 19.5-18.5 MB
			"start.ratios.first_execute_p50_isolated_over_plain": true, "start.ratios.burst_isolated_over_plain": false,
			"start.ratios.pss_isolated_minus_plain_mb": true,
			"start.first_execute.fork_prewarm.p50_ms":  true, // 10 ms against 15
		}
		for name, met := range want {
			if got, ok := goals[name]; !ok || got != met {
				t.Errorf("goal %s: met %v (present %v), want %v", name, got, ok, met)
			}
		}
		if alone && len(r.Goals) != len(want) {
			t.Errorf("alone, goals %+v", r.Goals)
		}
		var table bytes.Buffer
		r.WriteTable(&table)
		for _, s := range []string{"100.0 ms", "spawn/fork 15.00", "isolated/plain 1.11", "isolated/plain 2.00", "isolated-plain MB 1.00", "<= 80: MISSED", "1200 (the cap of 1200 sessions)", "< 200: MISSED", "10.0 ms / 11.0 ms", "21.0 MB", "0.40%", "12.0 ms / 8.0 ms", "<= 20.4: met", "70.0 ms / 10.0 ms"} {
			if !strings.Contains(table.String(), s) {
				t.Errorf("table lacks %q:\n%s", s, table.String())
			}
		}
	}
}
