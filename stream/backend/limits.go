package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream/backend/isolate"
	"github.com/aiod/aiod/stream/backend/sandbox"
)

// Isolation configures the limits, environment and user of local
// runtimes (see package isolate).
type Isolation = isolate.Config

// IsolationReport is discovery's view of the isolation in force.
type IsolationReport = isolate.Report

// Isolation reports the limits, user and environment runtimes get, and
// the tenant isolation of the caller whose tenant is tenant.
func (r *Runtimes) Isolation(tenant string) IsolationReport {
	rep := r.iso.Report()
	rep.TenantReport = r.iso.TenantReport(tenant)
	return rep
}

// TenantReport is discovery's view of tenant isolation.
type TenantReport = isolate.TenantReport

// TenantIsolation describes tenant isolation for tenant.
func (r *Runtimes) TenantIsolation(tenant string) TenantReport { return r.iso.TenantReport(tenant) }

// MemoryFlag and TotalMemoryFlag name the memory limits' settings in what
// a caller reads.
const (
	MemoryFlag       = "--runtime-memory-limit"
	TotalMemoryFlag  = "--runtimes-memory-total"
	TenantMemoryFlag = "--tenant-memory-limit"
)

// placement puts one start's process under the limits before anything of
// it runs: admit is the start's Admit hook (nil when no limit is set), called
// while the process waits at its gate (package proc); it makes the process's
// own cgroup (or sets its rlimits), unless charge, a forked kernel's Charge
// hook, made it before the fork. A start that retries (a fork that fell
// back to a spawn) calls admit again, and the earlier group goes unless no
// process joined it yet.
type placement struct {
	r      *Runtimes
	t      *sandbox.Tenant // the tenant it starts for; nil none
	l      *isolate.Limits
	joined bool // a process joined l
}

// charge is the Charge hook of a kernel start: the group its process will
// join, made before the fork (isolate.Limits.ChargeFile); nil unless cgroup
// v1 (on v2 with a memory limit the template pins no hot pages).
func (p *placement) charge() func() (string, error) {
	if p.r.iso.ChargeHome() == "" {
		return nil
	}
	return func() (string, error) {
		p.failed() // an earlier attempt's
		l, err := p.r.iso.Prepare(p.t)
		if err != nil {
			return "", err
		}
		p.l, p.joined = l, false
		return l.ChargeFile(), nil
	}
}

// admit is the Admit hook of a start; nil without limits.
func (p *placement) admit() func(pid int) error {
	if p.r.iso.Mechanism() == isolate.None {
		return nil
	}
	return func(pid int) error {
		if p.l != nil && !p.joined { // made by charge
			err := p.l.Join(pid)
			if err != nil {
				p.l = nil // Join undid it
			}
			p.joined = err == nil
			return err
		}
		p.failed() // an earlier attempt's
		var err error
		p.l, err = p.r.iso.Apply(pid, p.t)
		p.joined = err == nil
		return err
	}
}

// failed releases the limits of a start that failed.
func (p *placement) failed() {
	if p.l != nil {
		_ = p.l.Close()
		p.l = nil
	}
}

// limit wraps a runtime started under p: the runtime returned classifies a
// death by the memory limit and kills what is left in its cgroup and
// removes the group when closed.
func (p *placement) limit(rt jupyter.Runtime) jupyter.Runtime {
	if p.l == nil {
		return rt
	}
	r, l := p.r, p.l
	w := &limited{Runtime: rt, l: l, log: r.log, memLimit: fmt.Sprintf("%s (%s)", FormatBytes(r.cfg.Isolation.MemoryBytes), MemoryFlag),
		totalLimit:   fmt.Sprintf("%s (%s)", FormatBytes(r.cfg.Isolation.TotalMemoryBytes), TotalMemoryFlag),
		tenantLimit:  fmt.Sprintf("%s (%s)", FormatBytes(r.cfg.Isolation.TenantMemoryBytes), TenantMemoryFlag),
		totalLimited: r.iso.TotalLimited()}
	c, isC := rt.(jupyter.Completer)
	s, isS := rt.(jupyter.Sender)
	switch {
	case isC && isS:
		return &limitedCS{limited: w, Completer: c, Sender: s}
	case isC:
		return &limitedC{limited: w, Completer: c}
	}
	return w
}

// Unwrap is the runtime under the limits, for extensions of its own that
// only a surface that knows them asks for (a bash REPL's input and job
// signals).
func (w *limited) Unwrap() jupyter.Runtime { return w.Runtime }

// limited is a runtime under limits. Every extension the runtime has
// (jupyter.Completer, jupyter.Sender) is kept by limitedC and limitedCS,
// since the gateway and stream find them by type assertion.
type limited struct {
	jupyter.Runtime
	l            *isolate.Limits
	log          *slog.Logger
	memLimit     string
	totalLimit   string
	tenantLimit  string
	totalLimited bool // all runtimes together have a memory limit

	base atomic.Uint64 // the group's OOM kills when the last execution began

	once sync.Once
	err  error // Err once Done is closed
}

// Execute notes the group's OOM kills so far: a kill before this execution
// (of a child process the runtime survived) does not explain a death
// during it.
func (w *limited) Execute(ctx context.Context, req jupyter.ExecuteRequest) error {
	w.base.Store(w.l.OOMKillsSoFar())
	return w.Runtime.Execute(ctx, req)
}

var (
	_ jupyter.Runtime   = (*limited)(nil)
	_ jupyter.Completer = (*limitedC)(nil)
	_ jupyter.Sender    = (*limitedCS)(nil)
	_ jupyter.Completer = (*limitedCS)(nil)
)

type limitedC struct {
	*limited
	jupyter.Completer
}

type limitedCS struct {
	*limited
	jupyter.Completer
	jupyter.Sender
}

// Err is the runtime's, with a death that its cgroup's oom_kill count
// explains marked jupyter.DeathOutOfMemory, naming the limit: the count
// went up since the last execution began, and the process was killed
// (SIGKILL, or an end nobody could read), not one that exited.
func (w *limited) Err() error {
	select {
	case <-w.Runtime.Done():
	default:
		return w.Runtime.Err()
	}
	w.once.Do(func() {
		w.err = w.Runtime.Err()
		var de *jupyter.DeadError
		if !errors.As(w.err, &de) || !(de.Signal == "SIGKILL" || de.Signal == "" && de.ExitCode < 0) {
			return
		}
		if w.l.OOMKills() <= w.base.Load() {
			return
		}
		// The OOM killer took it: its own limit when its group reached
		// it, else its tenant's quota when the tenant's group reached
		// that, else the parent's, the limit of all runtimes together
		// (another runtime may hold most of that).
		oom := *de
		oom.Kind, oom.Limit = jupyter.DeathOutOfMemory, w.memLimit
		oom.Cause = "killed by its memory limit of " + w.memLimit + " (" + de.Cause + ")"
		switch {
		case w.l.ReachedOwnLimit():
		case w.l.ReachedTenantLimit():
			oom.Limit = w.tenantLimit
			oom.Cause = "killed when the tenant's runtimes together reached its memory quota of " + w.tenantLimit + " (" + de.Cause + ")"
		case w.totalLimited:
			oom.Limit = w.totalLimit
			oom.Cause = "killed when all runtimes together reached their memory limit of " + w.totalLimit + " (" + de.Cause + ")"
		}
		w.err = &oom
	})
	return w.err
}

// Close closes the runtime, then kills what it left in its cgroup and
// removes the group.
func (w *limited) Close(ctx context.Context) error {
	err := w.Runtime.Close(ctx)
	w.Err() // classify while the group's counters can still be read
	lerr := w.l.Close()
	if lerr != nil {
		w.log.Warn("runtime cgroup not removed", "pid", w.Info().PID, "err", lerr)
	}
	return errors.Join(err, lerr)
}

// FormatBytes writes n in binary units: "512 MiB", "1.5 GiB".
func FormatBytes(n int64) string {
	units := []string{"bytes", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d %s", int64(f), units[i])
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}
