package execution

import (
	"strings"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
)

// Execution statuses.
const (
	StatusOK      = "ok"
	StatusError   = "error"
	StatusTimeout = "timeout"
)

// Kinds of failure, as Result.ErrorKind (and the answers' data.error_kind)
// carry them. An execution that ended ok has none.
const (
	KindException   = "exception"     // the code raised
	KindTimeout     = "timeout"       // the call's timeout passed (running or queued)
	KindInterrupted = "interrupted"   // stopped on purpose: an interrupt, a restart, a delete, a cancelled call, shutdown
	KindDied        = "runtime_died"  // the runtime died on its own; the session's state is gone
	KindOutOfMemory = "out_of_memory" // the runtime's memory limit killed it; the session's state is gone
	KindNoReply     = "no_reply"      // the runtime went idle but never sent the execute_reply: whether the code ran is unknown
	KindAdmission   = "admission"     // refused by a limit before it ran (429 or 503)
	KindStart       = "start_failed"  // no runtime could be started (503)
	// KindDaemonRestarted: aiod stopped while the execution was queued or
	// running; after a restart its id answers with this kind.
	KindDaemonRestarted = "daemon_restarted"
)

// Result is one finished execution, ready to be rendered by any route.
type Result struct {
	ID             string        // msg_id of the execute_request
	ExecutionID    string        // the execution's id (chosen by the caller, or made by aiod)
	Queued         time.Duration // how long the call waited behind earlier calls of its session
	Replayed       bool          // the stored result of an execution that had finished before this call (a copy)
	Ref            string        // the caller's reference
	Code           string
	Language       string
	SessionID      string // "" for one-shot calls
	Status         string // ok, error or timeout
	ExecutionCount *int
	Outputs        []*Output
	Truncated      bool
	Fresh          bool              // the runtime was (re)started for this call after a loss of state
	Restored       bool              // the runtime was started for this call and the session's saved state restored into it
	Skipped        map[string]string // with Restored: what the snapshot could not save or restore (name -> why)
	Notes          []string          // what the caller should know, joined into the envelope's message
	Warnings       []string          // about the request itself (ExecRequest.Warnings)
	NextInput      string            // the text a set_next_input payload proposed for the next cell
	InterruptedBy  string            // who interrupted the execution ("a timeout", Session.Interrupt's by), or ""
	ErrorKind      string            // why it did not end ok: one of the Kind* constants; "" when Status is ok
	ExitStatus     *int              // bash: the exit code of the last command; nil for other languages
	Runtime        jupyter.RuntimeInfo
}

// Success is true when the code ran to the end without raising.
func (r *Result) Success() bool { return r.Status == StatusOK }

// Message is the envelope's message: "ok", or the notes.
func (r *Result) Message() string {
	if len(r.Notes) == 0 {
		return "ok"
	}
	return strings.Join(r.Notes, "; ")
}

// Text concatenates every stream output of that name.
func (r *Result) Text(name string) string {
	var only *Output
	n := 0
	for _, o := range r.Outputs {
		if o.Type == "stream" && o.Name == name {
			only = o
			n++
		}
	}
	switch n {
	case 0:
		return ""
	case 1:
		return only.Text
	}
	var b strings.Builder
	for _, o := range r.Outputs {
		if o.Type == "stream" && o.Name == name {
			b.WriteString(o.Text)
		}
	}
	return b.String()
}

// FirstError returns the first error output, or nil.
func (r *Result) FirstError() *Output {
	for _, o := range r.Outputs {
		if o.Type == "error" {
			return o
		}
	}
	return nil
}

// ExitCode is 0 for ok, 1 for error and 124 for timeout, as a shell would
// say; a bash execution that ended says its last command's.
func (r *Result) ExitCode() int {
	if r.ExitStatus != nil && r.Status != StatusTimeout {
		return *r.ExitStatus
	}
	switch r.Status {
	case StatusOK:
		return 0
	case StatusTimeout:
		return 124
	}
	return 1
}

// Note adds a sentence to what the result's message says.
func (r *Result) Note(s string) { r.Notes = append(r.Notes, s) }

// Plain is the result as the REST routes show it: stream text (and the
// text/plain of pager outputs) without ANSI escape codes, as tracebacks
// already are; an agent reads it, not a terminal. r itself when it holds
// none; otherwise a copy, so the WebSocket and watchers keep the colours.
func (r *Result) Plain() *Result {
	var outs []*Output
	for i, o := range r.Outputs {
		cp := *o
		changed := false
		switch {
		case o.Type == jupyter.MsgStream && strings.Contains(o.Text, "\x1b"):
			cp.Text, changed = StripANSI(o.Text), true
		case o.page:
			changed = plainPage(&cp)
		}
		if !changed {
			continue
		}
		if outs == nil {
			outs = append([]*Output(nil), r.Outputs...)
		}
		outs[i] = &cp
	}
	if outs == nil {
		return r
	}
	p := *r
	p.Outputs = outs
	return &p
}
