// Package restore times snapshots of sessions by size and the first call
// on each saved session after a restart of the daemon (issue 43), for
// aiobench compare and aiobench persist.
package restore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// Result is the phase: sessions of several sizes saved by one daemon,
// then the first call on each after restarts.
type Result struct {
	Rounds int    `json:"rounds"` // restarts, each timing one restore per size
	Sizes  []Size `json:"sizes"`
	Err    string `json:"error,omitempty"`
}

// Size is the snapshot and restore of a session holding a DataFrame of
// Rows rows (three columns, one of strings) beside a few small values;
// Rows 0 is a session without one.
type Size struct {
	Rows          int       `json:"rows"`
	SnapshotBytes int64     `json:"snapshot_bytes"`
	SnapshotMs    []float64 `json:"snapshot_ms"` // POST .../snapshot, three times
	// RestoreCallMs is the first call on the saved session after a
	// restart, with the new daemon's pool full: a runtime taken from
	// the pool (or started), the restore, and a one-line cell.
	RestoreCallMs []float64 `json:"restore_call_ms"`
}

// RestoreP50 is the median of the restores.
func (s Size) RestoreP50() float64 { return median(s.RestoreCallMs) }

// SnapshotP50 is the median of the snapshots.
func (s Size) SnapshotP50() float64 { return median(s.SnapshotMs) }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Goal is a restore goal of issue 43: the p50 of Rows' restores at most
// Ms.
type Goal struct {
	Rows int
	Ms   float64
}

// Goals are issue 43's: a small session at most 150 ms, a 100,000-row
// DataFrame's 500 ms.
var Goals = []Goal{{0, 150}, {100_000, 500}}

// GoalName names the goal of rows' restores in a report.
func GoalName(rows int) string { return fmt.Sprintf("restores.rows_%d.restore_p50_ms", rows) }

// P50 is the restores' p50 of rows, false when none was measured.
func (r *Result) P50(rows int) (float64, bool) {
	for _, s := range r.Sizes {
		if s.Rows == rows && len(s.RestoreCallMs) > 0 {
			return s.RestoreP50(), true
		}
	}
	return 0, false
}

// Header says what the phase did, for a table's caption.
func (r *Result) Header() string {
	return fmt.Sprintf("snapshots and restores: a daemon with its defaults (AIO_CODE_BACKEND=kernel, default isolation and pool) saves a session of each size, three snapshots each, then is restarted %d times; after each restart, once its pool is full, the first call on each saved session is timed (a pooled kernel, the restore, %q); a size's rows are a DataFrame of three columns, one of strings, beside small values (0: none)",
		r.Rounds, Check)
}

// Rows are the table's rows, the header first; goal gives a size's goal
// cell.
func (r *Result) Rows(goal func(rows int) string) [][]string {
	out := [][]string{{"session", "snapshot size", "snapshot p50", "first call after a restart, p50 (min-max)", "goal"}}
	for _, s := range r.Sizes {
		name := "small (no DataFrame)"
		if s.Rows > 0 {
			name = fmt.Sprintf("%d rows", s.Rows)
		}
		lo, hi := 0.0, 0.0
		if len(s.RestoreCallMs) > 0 {
			lo, hi = slices.Min(s.RestoreCallMs), slices.Max(s.RestoreCallMs)
		}
		out = append(out, []string{name, fmt.Sprintf("%d B", s.SnapshotBytes), fmt.Sprintf("%.1f ms", s.SnapshotP50()),
			fmt.Sprintf("%.1f ms (%.1f-%.1f)", s.RestoreP50(), lo, hi), goal(s.Rows)})
	}
	return out
}

// Setup is the code that makes a session of a DataFrame of rows rows
// (none for 0); Check and Want are the cell run on it after a restore and
// what it prints.
func Setup(rows int) string {
	code := "x = 1\ny = [1, 2, 3]\ndef f(a):\n    return a + x\n"
	if rows > 0 {
		code += fmt.Sprintf("import numpy as np\nimport pandas as pd\nn = %d\n", rows) +
			"df = pd.DataFrame({'a': np.arange(n), 'b': np.arange(n) * 0.5, 'c': ['r%d' % i for i in range(n)]})\n"
	}
	return code + "print(1)\n"
}

// The cell run on a restored session, and what it prints.
const (
	Check = "print(f(1), y)"
	Want  = "2 [1, 2, 3]\n"
)

// Daemon is what the phase needs of a running aiod.
type Daemon interface {
	URL() string
	WaitFullPool(ctx context.Context) error
	Stop()
}

// BySize saves a session of each of rows (three snapshots each) on the
// daemon start starts (with its defaults and the same state folder each
// time), then restarts it rounds times and times the first call on each
// saved session, each once the daemon's pool is full again, as a restore
// that comes after another would.
func BySize(ctx context.Context, start func() (Daemon, error), rows []int, rounds int, say func(string, ...any)) ([]Size, error) {
	begin := func() (Daemon, error) {
		d, err := start()
		if err != nil {
			return nil, err
		}
		if err := d.WaitFullPool(ctx); err != nil {
			d.Stop()
			return nil, err
		}
		return d, nil
	}
	d, err := begin()
	if err != nil {
		return nil, err
	}
	defer func() {
		if d != nil {
			d.Stop()
		}
	}()
	hc := &http.Client{Timeout: 5 * time.Minute}
	sizes := make([]Size, len(rows))
	for i, n := range rows {
		sizes[i].Rows = n
		sid := fmt.Sprintf("size-%d", n)
		if _, _, err := execute(ctx, hc, d, sid, Setup(n)); err != nil {
			return nil, err
		}
		for range 3 {
			var snap struct {
				Data struct {
					Bytes int64 `json:"bytes"`
				} `json:"data"`
			}
			began := time.Now()
			if err := post(ctx, hc, d, "/v2/code/sessions/"+sid+"/snapshot", map[string]any{}, &snap); err != nil {
				return nil, err
			}
			sizes[i].SnapshotMs = append(sizes[i].SnapshotMs, ms(time.Since(began)))
			sizes[i].SnapshotBytes = snap.Data.Bytes
		}
	}
	for range rounds {
		d.Stop()
		if d, err = begin(); err != nil {
			return nil, err
		}
		for i, n := range rows {
			// Each restore takes a pooled kernel, as the first call after
			// a restart would: the one before it took one.
			if err := d.WaitFullPool(ctx); err != nil {
				return nil, err
			}
			sid := fmt.Sprintf("size-%d", n)
			a, took, err := execute(ctx, hc, d, sid, Check)
			if err != nil {
				return nil, err
			}
			if !a.Restored || a.Stdout != Want {
				return nil, fmt.Errorf("saved session %s after a restart: restored %v, stdout %q (want %q)", sid, a.Restored, a.Stdout, Want)
			}
			sizes[i].RestoreCallMs = append(sizes[i].RestoreCallMs, took)
		}
	}
	for _, s := range sizes {
		say("restore: %d rows, %d bytes: snapshot %v ms, first call after a restart %v ms", s.Rows, s.SnapshotBytes, s.SnapshotMs, s.RestoreCallMs)
	}
	return sizes, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// answer is the part of an execute answer a restore is checked by.
type answer struct {
	Status   string `json:"status"`
	Stdout   string `json:"stdout"`
	Restored bool   `json:"restored"`
}

// execute runs code in session sid and returns its answer, timed.
func execute(ctx context.Context, hc *http.Client, d Daemon, sid, code string) (answer, float64, error) {
	var env struct {
		Message string `json:"message"`
		Data    answer `json:"data"`
	}
	began := time.Now()
	err := post(ctx, hc, d, "/v2/code/execute", map[string]any{"language": "python", "session_id": sid, "code": code, "timeout": 120}, &env)
	took := ms(time.Since(began))
	if err == nil && env.Data.Status != "ok" {
		err = fmt.Errorf("session %s: %s %s", sid, env.Data.Status, env.Message)
	}
	return env.Data, took, err
}

// post posts body as JSON to path and decodes a 200 answer into out.
func post(ctx context.Context, hc *http.Client, d Daemon, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %d %.300s", path, resp.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}
