package compare

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

// RestoreResult is the snapshot and restore phase: sessions of several
// sizes saved by one daemon, then the first call on each after restarts.
type RestoreResult struct {
	Rounds int           `json:"rounds"` // restarts, each timing one restore per size
	Sizes  []RestoreSize `json:"sizes"`
	Err    string        `json:"error,omitempty"`
}

// RestoreSize is the snapshot and restore of a session holding a DataFrame
// of Rows rows (three columns, one of strings) beside a few small values;
// Rows 0 is a session without one.
type RestoreSize struct {
	Rows          int       `json:"rows"`
	SnapshotBytes int64     `json:"snapshot_bytes"`
	SnapshotMs    []float64 `json:"snapshot_ms"` // POST .../snapshot, three times
	// RestoreCallMs is the first call on the saved session after a
	// restart, with the new daemon's pool full: a runtime taken from
	// the pool (or started), the restore, and a one-line cell.
	RestoreCallMs []float64 `json:"restore_call_ms"`
}

// RestoreP50 is the median of the restores.
func (s RestoreSize) RestoreP50() float64 { return median(s.RestoreCallMs) }

// SnapshotP50 is the median of the snapshots.
func (s RestoreSize) SnapshotP50() float64 { return median(s.SnapshotMs) }

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

// RestoreSetup is the code that makes a session of a DataFrame of rows
// rows (none for 0); RestoreCheck and RestoreWant are the cell run on it
// after a restore and what it prints.
func RestoreSetup(rows int) string {
	code := "x = 1\ny = [1, 2, 3]\ndef f(a):\n    return a + x\n"
	if rows > 0 {
		code += fmt.Sprintf("import numpy as np\nimport pandas as pd\nn = %d\n", rows) +
			"df = pd.DataFrame({'a': np.arange(n), 'b': np.arange(n) * 0.5, 'c': ['r%d' % i for i in range(n)]})\n"
	}
	return code + "print(1)\n"
}

const (
	RestoreCheck = "print(f(1), y)"
	RestoreWant  = "2 [1, 2, 3]\n"
)

// RestoreBySize saves a session of each of rows (three snapshots each) on
// a daemon with its defaults (tenant isolation when run as root, the
// default pool) and state in state, then restarts it rounds times and
// times the first call on each saved session, each once the daemon's pool
// is full again, as a restore that comes after another would. env is
// added to each start (the state folder, tenant uids: the same every
// time).
func RestoreBySize(ctx context.Context, name, bin, dir, run string, rows []int, rounds int, env []string, say func(string, ...any)) ([]RestoreSize, error) {
	start := func() (*daemon, error) {
		d, err := startDaemon(ctx, name, bin, dir, run, env...)
		if err != nil {
			return nil, err
		}
		if err := waitFullPool(ctx, d); err != nil {
			d.stop()
			return nil, err
		}
		return d, nil
	}
	d, err := start()
	if err != nil {
		return nil, err
	}
	defer func() {
		if d != nil {
			d.stop()
		}
	}()
	sizes := make([]RestoreSize, len(rows))
	for i, n := range rows {
		sizes[i].Rows = n
		sid := fmt.Sprintf("size-%d", n)
		if _, _, err := restoreExec(ctx, d, sid, RestoreSetup(n)); err != nil {
			return nil, err
		}
		for range 3 {
			var snap struct {
				Data struct {
					Bytes int64 `json:"bytes"`
				} `json:"data"`
			}
			began := time.Now()
			if err := d.postJSON(ctx, "/v2/code/sessions/"+sid+"/snapshot", map[string]any{}, &snap); err != nil {
				return nil, err
			}
			sizes[i].SnapshotMs = append(sizes[i].SnapshotMs, ms(time.Since(began)))
			sizes[i].SnapshotBytes = snap.Data.Bytes
		}
	}
	for range rounds {
		d.stop()
		if d, err = start(); err != nil {
			return nil, err
		}
		for i, n := range rows {
			// Each restore takes a pooled kernel, as the first call after
			// a restart would: the one before it took one.
			if err := waitFullPool(ctx, d); err != nil {
				return nil, err
			}
			sid := fmt.Sprintf("size-%d", n)
			a, took, err := restoreExec(ctx, d, sid, RestoreCheck)
			if err != nil {
				return nil, err
			}
			if !a.Restored || a.Stdout != RestoreWant {
				return nil, fmt.Errorf("saved session %s after a restart: restored %v, stdout %q (want %q)", sid, a.Restored, a.Stdout, RestoreWant)
			}
			sizes[i].RestoreCallMs = append(sizes[i].RestoreCallMs, took)
		}
	}
	for _, s := range sizes {
		say("restore: %d rows, %d bytes: snapshot %v ms, first call after a restart %v ms", s.Rows, s.SnapshotBytes, s.SnapshotMs, s.RestoreCallMs)
	}
	return sizes, nil
}

// restoreAnswer is the part of an execute answer a restore is checked by.
type restoreAnswer struct {
	Status   string `json:"status"`
	Stdout   string `json:"stdout"`
	Restored bool   `json:"restored"`
}

// restoreExec runs code in session sid and returns its answer, timed.
func restoreExec(ctx context.Context, d *daemon, sid, code string) (restoreAnswer, float64, error) {
	var env struct {
		Message string        `json:"message"`
		Data    restoreAnswer `json:"data"`
	}
	began := time.Now()
	err := d.postJSON(ctx, "/v2/code/execute", map[string]any{"language": "python", "session_id": sid, "code": code, "timeout": 120}, &env)
	took := ms(time.Since(began))
	if err == nil && env.Data.Status != "ok" {
		err = fmt.Errorf("session %s: %s %s", sid, env.Data.Status, env.Message)
	}
	return env.Data, took, err
}

// postJSON posts body as JSON to path and decodes a 200 answer into out.
func (d *daemon) postJSON(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
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

// restores runs the snapshot and restore phase on a daemon of its own.
func (r *runner) restores(ctx context.Context) {
	rr := &RestoreResult{Rounds: r.cfg.RestoreRounds}
	r.res.Restores = rr
	r.logf("restores: sessions of %v rows, %d restarts", r.cfg.RestoreRows, rr.Rounds)
	// One uid range for every start: the state folder's saved tenants
	// keep theirs.
	sizes, err := RestoreBySize(ctx, "restore", r.bin, r.dir, r.run, r.cfg.RestoreRows, rr.Rounds,
		append(slices.Clone(r.env), "AIO_CODE_BACKEND=kernel", "AIO_TENANT_UIDS="+tenantUIDs()), r.logf)
	if err != nil {
		rr.Err = err.Error()
		r.res.Failures["restores"] = err.Error()
		return
	}
	rr.Sizes = sizes
}

// restoreGoals are issue 43's restore goals, for the sizes it names.
func (r *Result) restoreGoals() []Goal {
	rr := r.Restores
	if rr == nil {
		return nil
	}
	var gs []Goal
	for _, t := range []struct {
		rows   int
		target float64
	}{{0, 150}, {100_000, 500}} {
		if !slices.Contains(r.Settings.RestoreRows, t.rows) {
			continue
		}
		var v *float64 // nil (missed) when the phase failed
		for _, s := range rr.Sizes {
			if s.Rows == t.rows && len(s.RestoreCallMs) > 0 {
				v = num(s.RestoreP50())
			}
		}
		gs = append(gs, goal(fmt.Sprintf("restores.rows_%d.restore_p50_ms", t.rows), v, "<=", t.target))
	}
	return gs
}

// writeRestoreTable prints the snapshot and restore phase.
func (r *Result) writeRestoreTable(w io.Writer) {
	rr := r.Restores
	if rr == nil {
		return
	}
	fmt.Fprintf(w, "\nsnapshots and restores: a daemon with its defaults (%s) saves a session of each size, three snapshots each, then is restarted %d times; after each restart, once its pool is full, the first call on each saved session is timed (a pooled kernel, the restore, %q); a size's rows are a DataFrame of three columns, one of strings, beside small values (0: none)\n\n",
		"AIO_CODE_BACKEND=kernel, default isolation and pool", rr.Rounds, RestoreCheck)
	if rr.Err != "" {
		fmt.Fprintf(w, "FAILED: %s\n", rr.Err)
		return
	}
	rows := [][]string{{"session", "snapshot size", "snapshot p50", "first call after a restart, p50 (min-max)", "goal"}}
	for _, s := range rr.Sizes {
		name := "small (no DataFrame)"
		if s.Rows > 0 {
			name = fmt.Sprintf("%d rows", s.Rows)
		}
		lo, hi := slices.Min(s.RestoreCallMs), slices.Max(s.RestoreCallMs)
		rows = append(rows, []string{name, fmt.Sprintf("%d B", s.SnapshotBytes), fmt.Sprintf("%.1f ms", s.SnapshotP50()),
			fmt.Sprintf("%.1f ms (%.1f-%.1f)", s.RestoreP50(), lo, hi), r.goalCell(fmt.Sprintf("restores.rows_%d.restore_p50_ms", s.Rows))})
	}
	writeMarkdown(w, rows)
}
