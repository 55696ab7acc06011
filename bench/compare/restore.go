package compare

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/aiod/aiod/bench/restore"
)

// restores runs the snapshot and restore phase (package restore) on a
// daemon of its own, with one state folder and uid range for every start:
// the saved tenants keep theirs.
func (r *runner) restores(ctx context.Context) {
	rr := &restore.Result{Rounds: r.cfg.RestoreRounds}
	r.res.Restores = rr
	r.logf("restores: sessions of %v rows, %d restarts", r.cfg.RestoreRows, rr.Rounds)
	env := append(slices.Clone(r.env), "AIO_CODE_BACKEND=kernel", "AIO_TENANT_UIDS="+tenantUIDs())
	start := func() (restore.Daemon, error) {
		d, err := StartDaemonRun(ctx, "restore", r.bin, r.dir, r.run, env...)
		if err != nil {
			return nil, err // not a nil *Daemon in an interface
		}
		return d, nil
	}
	sizes, err := restore.BySize(ctx, start, r.cfg.RestoreRows, rr.Rounds, r.logf)
	if err != nil {
		rr.Err = err.Error()
		r.res.Failures["restores"] = err.Error()
		return
	}
	rr.Sizes = sizes
}

// restoreGoals are issue 43's restore goals for the sizes the phase was
// to measure: missed (no value) when it failed.
func (r *Result) restoreGoals() []Goal {
	if r.Restores == nil {
		return nil
	}
	var gs []Goal
	for _, g := range restore.Goals {
		if !slices.Contains(r.Settings.RestoreRows, g.Rows) {
			continue
		}
		var v *float64
		if p50, ok := r.Restores.P50(g.Rows); ok {
			v = num(p50)
		}
		gs = append(gs, goal(restore.GoalName(g.Rows), v, "<=", g.Ms))
	}
	return gs
}

// writeRestoreTable prints the snapshot and restore phase.
func (r *Result) writeRestoreTable(w io.Writer) {
	rr := r.Restores
	if rr == nil {
		return
	}
	fmt.Fprintf(w, "\n%s\n\n", rr.Header())
	if rr.Err != "" {
		fmt.Fprintf(w, "FAILED: %s\n", rr.Err)
		return
	}
	writeMarkdown(w, rr.Rows(func(rows int) string { return r.goalCell(restore.GoalName(rows)) }))
}
