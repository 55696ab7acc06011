package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
)

// This file holds what the live routes (WebSocket streaming and the Jupyter
// kernels API) need beyond the REST path: one message as one output, a
// runtime started without code, a restart, and session bookkeeping.

// OutputOf converts one iopub message into the output it carries, exactly
// as the kernel sent it: a stream chunk is not merged with its neighbours.
// Tracebacks and error names lose their ANSI codes, as in collected
// results. ok is false for messages that carry no output (status,
// execute_input, clear_output, update_display_data, ...).
func OutputOf(m *jupyter.Message) (o *Output, ok bool) {
	t := m.Header.MsgType
	switch t {
	case "stream", "execute_result", "display_data", "error":
	default:
		return nil, false
	}
	var ct iopubContent
	if err := json.Unmarshal(m.Content, &ct); err != nil {
		return nil, false
	}
	switch t {
	case "stream":
		return &Output{Type: t, Name: ct.Name, Text: ct.Text}, true
	case "error":
		tb := make([]string, len(ct.Traceback))
		for i, l := range ct.Traceback {
			tb[i] = StripANSI(l)
		}
		return &Output{Type: t, Ename: StripANSI(ct.Ename), Evalue: StripANSI(ct.Evalue), Traceback: tb}, true
	}
	o = &Output{Type: t, Data: ct.Data, Metadata: ct.Metadata, DisplayID: ct.Transient.DisplayID}
	if t == "execute_result" {
		o.ExecutionCount = ct.ExecutionCount
	}
	return o, true
}

// Closed is closed when the session has been deleted, reclaimed or shut down.
func (s *Session) Closed() <-chan struct{} { return s.closed }

// Touch marks the session as used now, so that the idle reaper leaves it
// alone while a client that bypasses Execute (a Jupyter front end talking
// to the kernel directly) is attached.
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
	select {
	case s.turn <- struct{}{}:
	case <-s.closed:
		return nil, ErrSessionClosed
	case <-ctx.Done():
		return nil, &StartError{Err: fmt.Errorf("wait for the session's turn: %w", context.Cause(ctx))}
	}
	defer func() { <-s.turn }()
	if rt := s.liveRuntime(); rt != nil {
		return rt, nil
	}
	return s.startRuntime(ctx)
}

// liveRuntime returns the runtime when it runs, or nil.
func (s *Session) liveRuntime() jupyter.Runtime {
	rt := s.Runtime()
	if rt == nil {
		return nil
	}
	select {
	case <-rt.Done():
		return nil
	default:
		return rt
	}
}

// startRuntime starts a fresh runtime and installs it; the caller holds the
// turn. A dead runtime still installed is closed first. A pending note
// about lost state is dropped: the next Execute finds this runtime running
// and would otherwise report the loss much later, against the wrong call.
func (s *Session) startRuntime(ctx context.Context) (jupyter.Runtime, error) {
	s.mu.Lock()
	old := s.rt
	s.rt = nil
	s.lost = ""
	s.mu.Unlock()
	if old != nil {
		s.reg.closeRuntime(old)
	}
	gen := s.mux.NextGen()
	sctx, cancel := context.WithCancel(s.reg.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	rt, err := s.Backend.Start(sctx, s.mux.Handler(gen))
	if err != nil {
		return nil, &StartError{Err: err}
	}
	s.mu.Lock()
	select {
	case <-s.closed:
		s.mu.Unlock()
		s.reg.closeRuntime(rt)
		return nil, ErrSessionClosed
	default:
	}
	s.rt, s.gen = rt, gen
	s.last = time.Now()
	s.mu.Unlock()
	return rt, nil
}

// Restart replaces the session's runtime with a fresh one: watchers see an
// iopub status "restarting", the old runtime is closed (code running in it
// ends with an error result), and once the new one answers they see
// "idle" ("dead" when it could not start). Bounded by ctx.
func (s *Session) Restart(ctx context.Context) (jupyter.Runtime, error) {
	s.PublishStatus("restarting")
	s.mu.Lock()
	old := s.rt
	s.rt = nil
	s.mu.Unlock()
	if old != nil {
		_ = old.Close(ctx)
	}
	select {
	case s.turn <- struct{}{}:
	case <-s.closed:
		s.PublishStatus("dead")
		return nil, ErrSessionClosed
	case <-ctx.Done():
		s.PublishStatus("dead")
		return nil, &StartError{Err: fmt.Errorf("wait for the session's turn: %w", context.Cause(ctx))}
	}
	defer func() { <-s.turn }()
	rt := s.liveRuntime()
	if rt == nil || rt == old {
		var err error
		if rt, err = s.startRuntime(ctx); err != nil {
			s.PublishStatus("dead")
			return nil, err
		}
	}
	s.PublishStatus("idle")
	return rt, nil
}

// PublishStatus sends an iopub status message with no parent to every
// watcher of the session, the way a Jupyter server announces a kernel
// restarting or dead.
func (s *Session) PublishStatus(state string) {
	ev := Event{Msg: jupyter.NewStatus(state)}
	for _, w := range *s.mux.watchers.Load() {
		w.Deliver(ev)
	}
}

// DeleteSession ends one session (not the others sharing its id in other
// languages) and reports whether it was registered.
func (r *Registry) DeleteSession(ctx context.Context, s *Session) bool {
	return r.remove(ctx, func(x *Session) bool { return x == s }, "deleted") > 0
}
