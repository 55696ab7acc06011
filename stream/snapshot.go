package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream/execution"
)

// firstSign bounds the wait for a runtime's first message about an
// internal execution.
const firstSign = 10 * time.Second

// ErrNoRuntime is returned by Session.Internal when no runtime is live.
var ErrNoRuntime = errors.New("the session has no live runtime")

// Snapshots saves named sessions' state and restores it (package
// stream/snapshot). The registry calls Save before it closes a session
// for idleness or at shutdown, Restore when a named session started a
// fresh runtime, and Forget when a session is deleted.
type Snapshots interface {
	// Reserve is called as the registry takes s out for idleness or at
	// shutdown, before another session of its name can exist: a restore
	// of the name waits until release is called (after SaveBeforeClose).
	Reserve(s *Session) (release func())
	// SaveBeforeClose snapshots s before its runtime is closed (why is
	// ClosedIdle or ClosedShutdown), within ctx, under the reservation
	// Reserve made; the next start of the same (tenant, language, id)
	// restores it.
	SaveBeforeClose(ctx context.Context, s *Session, why string)
	// Restore loads the state saved for s, if it waits for a restore,
	// into its fresh runtime with run (the session's turn is held).
	// waiting is false when nothing was waiting; otherwise restored says
	// whether it loaded, skipped what it could not, and note what to tell
	// the caller.
	Restore(ctx context.Context, s *Session, run InternalRun) (waiting, restored bool, skipped map[string]string, note string)
	// Forget deletes what is saved for tenant's session id (lang "": any
	// language) and says how many sessions had something saved.
	Forget(tenant, lang, id string) int
}

// InternalRun runs code in the session's runtime as aiod's own execution
// (Session.Internal's rules), with a timeout and an output budget; expr,
// when set, is evaluated after it as a user expression (kernels only).
type InternalRun func(ctx context.Context, code, expr string, timeout time.Duration, budget int) (*execution.Result, error)

// reserveSaves reserves the names of the named sessions ss that are about
// to be saved (why is idle or shutdown); r.mu is held. The function
// returned releases them.
func (r *Registry) reserveSaves(ss []*Session, why string) (release func()) {
	sn := r.cfg.Snapshots
	if sn == nil || (why != ClosedIdle && why != ClosedShutdown) {
		return func() {}
	}
	var rel []func()
	for _, s := range ss {
		if s.ID != "" {
			rel = append(rel, sn.Reserve(s))
		}
	}
	return func() {
		for _, f := range rel {
			f()
		}
	}
}

// saveBeforeClose lets the snapshots save s before it is closed for
// idleness or at shutdown, when it is named and has a live runtime.
func (r *Registry) saveBeforeClose(ctx context.Context, s *Session, why string) {
	sn := r.cfg.Snapshots
	if sn == nil || s.ID == "" || (why != ClosedIdle && why != ClosedShutdown) {
		return
	}
	if rt := s.Runtime(); rt == nil || isDone(rt) {
		return
	}
	sn.SaveBeforeClose(ctx, s, why)
}

// Internal runs code in the session's live runtime as aiod's own
// execution: in the session's order (after the calls that arrived before
// it), silently and without history (no execution count, no In/Out), with
// no record in the execution store, unseen by the session's watchers. It
// starts no runtime (ErrNoRuntime). The timeout counts the wait for the
// turn too; a timeout interrupts the code, as a call's would.
func (s *Session) Internal(ctx context.Context, code string, timeout time.Duration, budget int) (*execution.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	turn, err := s.turnBehindCalls(ctx)
	if err != nil {
		return nil, err
	}
	defer turn.done()
	s.mu.Lock()
	rt, gen := s.rt, s.gen
	s.pending++ // the idle reaper leaves it alone meanwhile
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.pending--
		s.mu.Unlock()
	}()
	if rt == nil || isDone(rt) {
		return nil, ErrNoRuntime
	}
	left := time.Until(deadlineOf(ctx, timeout))
	return s.runInternal(ctx, rt, gen, code, "", left, budget)
}

func deadlineOf(ctx context.Context, d time.Duration) time.Time {
	if t, ok := ctx.Deadline(); ok {
		return t
	}
	return time.Now().Add(d)
}

// runInternal runs code in rt; the caller holds the turn.
func (s *Session) runInternal(ctx context.Context, rt jupyter.Runtime, gen uint64, code, expr string, timeout time.Duration, budget int) (*execution.Result, error) {
	res := &execution.Result{ID: jupyter.NewID(), Code: code, Language: s.Language, SessionID: s.ID}
	ex := s.mux.beginInternal(res.ID, budget)
	defer s.mux.End(ex)
	req := jupyter.ExecuteRequest{MsgID: res.ID, Code: code, Silent: true, NoHistory: true}
	if expr != "" {
		req.UserExpressions = map[string]string{"aiod": expr}
	}
	if err := rt.Execute(ctx, req); err != nil {
		s.discard(rt, gen, "sending to it failed: "+err.Error())
		return nil, fmt.Errorf("send to the runtime: %w", err)
	}
	// A runtime that shows no sign of the request (a kernel answers busy
	// at once) is not waited for past firstSign: a save at shutdown must
	// not hold up the stop.
	sign := time.NewTimer(min(timeout, firstSign))
	select {
	case <-ex.activity:
	case <-rt.Done():
	case <-ctx.Done():
	case <-sign.C:
		return nil, fmt.Errorf("the runtime showed no sign of aiod's request within %s", min(timeout, firstSign))
	}
	sign.Stop()
	deadline := time.NewTimer(max(timeout, time.Millisecond))
	defer deadline.Stop()
	s.wait(ctx, ex, rt, gen, deadline, timeout, res)
	s.finish(ex, res)
	return res, nil
}

// Prepare makes sure the session has a runtime, in its order: it starts
// one when none is live (restoring saved state into it, as a call would)
// and says so in the result it returns, which runs no code.
func (s *Session) Prepare(ctx context.Context, timeout time.Duration) (*execution.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	turn, err := s.turnBehindCalls(ctx)
	if err != nil {
		return nil, err
	}
	defer turn.done()
	s.mu.Lock()
	s.pending++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.pending--
		s.last = time.Now()
		s.mu.Unlock()
	}()
	res := &execution.Result{Language: s.Language, SessionID: s.ID, Status: execution.StatusOK}
	if _, _, err := s.runtime(ctx, res); err != nil {
		return nil, err
	}
	return res, nil
}

// restore loads the session's saved state into rt, which was just started
// for it; lost is why earlier state was gone (the caller's note, when
// nothing was restored). It reports whether the state came back.
func (s *Session) restore(ctx context.Context, rt jupyter.Runtime, gen uint64, res *execution.Result, lost string) bool {
	run := func(ctx context.Context, code, expr string, timeout time.Duration, budget int) (*execution.Result, error) {
		return s.runInternal(ctx, rt, gen, code, expr, timeout, budget)
	}
	waiting, restored, skipped, note := s.reg.cfg.Snapshots.Restore(ctx, s, run)
	if !waiting {
		return false
	}
	if !restored {
		res.Fresh = true
		res.Note(fmt.Sprintf("this call ran in a fresh %s: %s", s.kind(), note))
		return true // said
	}
	res.Restored, res.Skipped = true, skipped
	if note != "" {
		res.Note(note)
	}
	return true
}

// turnBehindCalls is awaitTurn for work of aiod's own in the session's
// order: its error says that it waited behind the session's calls.
func (s *Session) turnBehindCalls(ctx context.Context) (*ticket, error) {
	turn, err := s.awaitTurn(ctx)
	if err != nil && !errors.Is(err, ErrSessionClosed) {
		err = fmt.Errorf("waiting for the session's earlier calls: %w", err)
	}
	return turn, err
}
