package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream/execution"
)

// This file holds what the live routes (WebSocket streaming and the Jupyter
// kernels API) need beyond the REST path: a runtime started without code, a
// restart, and session bookkeeping.

// Closed is closed when the session has been deleted, reclaimed or shut down.
func (s *Session) Closed() <-chan struct{} { return s.closed }

// Touch marks the session as used now.
func (s *Session) Touch() {
	s.mu.Lock()
	s.last = time.Now()
	s.mu.Unlock()
}

// EnsureRuntime returns the session's live runtime, starting one when none
// runs. It waits for the session's turn only when it has to start one, and
// gives up when ctx ends. Errors are *StartError or ErrSessionClosed.
func (s *Session) EnsureRuntime(ctx context.Context) (jupyter.Runtime, error) {
	if rt := s.liveRuntime(); rt != nil {
		return rt, nil
	}
	done, err := s.takeTurn(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if rt := s.liveRuntime(); rt != nil {
		return rt, nil
	}
	rt, err := s.startRuntime(ctx)
	if err == nil && s.ID != "" && s.reg.cfg.Snapshots != nil {
		// A front end's start restores a saved session too; the next
		// call's answer says so.
		s.mu.Lock()
		gen := s.gen
		s.mu.Unlock()
		res := &execution.Result{}
		if s.restore(ctx, rt, gen, res, "") {
			s.mu.Lock()
			s.told = res
			s.mu.Unlock()
		}
	}
	return rt, err
}

// takeTurn waits for the session's turn, bounded by ctx, and returns the
// function that gives it back.
func (s *Session) takeTurn(ctx context.Context) (done func(), err error) {
	t, err := s.awaitTurn(ctx)
	if err != nil {
		if !errors.Is(err, ErrSessionClosed) {
			err = &StartError{Err: fmt.Errorf("wait for the session's turn: %w", context.Cause(ctx))}
		}
		return nil, err
	}
	return t.done, nil
}

// awaitTurn joins the session's line and waits for the turn: ctx's error
// or ErrSessionClosed when it ends first.
func (s *Session) awaitTurn(ctx context.Context) (*ticket, error) {
	t := s.turns.join()
	select {
	case <-t.ready:
		return t, nil
	case <-s.closed:
		t.done()
		return nil, ErrSessionClosed
	case <-ctx.Done():
		t.done()
		return nil, ctx.Err()
	}
}

// liveRuntime returns the runtime when it runs, or nil.
func (s *Session) liveRuntime() jupyter.Runtime {
	rt := s.Runtime()
	if rt == nil || isDone(rt) {
		return nil
	}
	return rt
}

// startRuntime starts a fresh runtime and installs it; the caller holds the
// turn. A dead runtime still installed is closed first. A pending note
// about lost state is kept: the next Execute reports it, since its caller's
// state is gone whoever started the new runtime.
func (s *Session) startRuntime(ctx context.Context) (jupyter.Runtime, error) {
	s.mu.Lock()
	old := s.rt
	s.setRuntimeLocked(nil)
	s.mu.Unlock()
	if old != nil {
		s.reg.closeRuntime(old)
	}
	rt, _, err := s.start(ctx)
	return rt, err
}

// Restart replaces the session's runtime with a fresh one: watchers see an
// iopub status "restarting", the old runtime is closed (code running in it
// ends with an error result that names by), and once the new one answers
// they see "idle" ("dead" when it could not start). by says who asked, e.g.
// "a client (Jupyter API restart)": the next call on the session is told
// that its runtime is fresh because of it, and the restart is logged.
// Bounded by ctx.
func (s *Session) Restart(ctx context.Context, by string) (jupyter.Runtime, error) {
	s.setRestarting(true, by)
	defer s.setRestarting(false, "")
	s.logLoss("runtime restarted", fmt.Sprintf("restarted by %s", by))
	s.PublishStatus(jupyter.StateRestarting)
	s.mu.Lock()
	old := s.rt
	s.setRuntimeLocked(nil)
	s.mu.Unlock()
	if old != nil {
		_ = old.Close(ctx)
	}
	done, err := s.takeTurn(ctx)
	if err != nil {
		s.markDead()
		s.PublishStatus(jupyter.StateDead)
		return nil, err
	}
	defer done()
	rt := s.liveRuntime()
	if rt == nil || rt == old {
		var err error
		if rt, err = s.startRuntime(ctx); err != nil {
			s.markDead()
			s.PublishStatus(jupyter.StateDead)
			return nil, err
		}
	}
	if s.ID != "" {
		s.mu.Lock()
		s.lost = fmt.Sprintf("the %s was restarted by %s", s.kind(), by)
		s.mu.Unlock()
	}
	s.PublishStatus(jupyter.StateIdle)
	return rt, nil
}

func (s *Session) setRestarting(on bool, by string) {
	s.mu.Lock()
	s.restarting, s.restartBy = on, by
	s.mu.Unlock()
}

func (s *Session) markDead() {
	s.mu.Lock()
	if s.rt == nil {
		s.dead = true
	}
	s.mu.Unlock()
}

// PublishStatus sends an iopub status message with no parent to every
// watcher of the session, the way a Jupyter server announces a kernel
// restarting or dead.
func (s *Session) PublishStatus(state string) {
	s.mux.publish(execution.Event{Msg: jupyter.NewStatus(state), State: state})
}

// Complete asks the session's runtime (started when none runs) for
// completions of code at cursorPos. It does not wait for the session's turn:
// a kernel answers while idle at once and, while it runs a cell, when the
// cell ends; ctx bounds the wait.
func (s *Session) Complete(ctx context.Context, code string, cursorPos int) (*jupyter.CompleteReply, error) {
	c, err := s.completer(ctx)
	if err != nil {
		return nil, err
	}
	return c.Complete(ctx, code, cursorPos)
}

// Inspect asks the session's runtime about the object at cursorPos, like
// Complete.
func (s *Session) Inspect(ctx context.Context, code string, cursorPos, detailLevel int) (*jupyter.InspectReply, error) {
	c, err := s.completer(ctx)
	if err != nil {
		return nil, err
	}
	return c.Inspect(ctx, code, cursorPos, detailLevel)
}

func (s *Session) completer(ctx context.Context) (jupyter.Completer, error) {
	rt, err := s.EnsureRuntime(ctx)
	if err != nil {
		return nil, err
	}
	c, ok := rt.(jupyter.Completer)
	if !ok {
		return nil, fmt.Errorf("the %s runtime cannot complete code", rt.Info().Backend)
	}
	return c, nil
}
