package stream

import "github.com/aiod/aiod/kernel/jupyter"

// Event is what a subscriber receives: a message of the session's runtime,
// or the final result of one execution (Msg nil, Result set).
//
// The mux decodes a message once, on the runtime's reader goroutine, and
// every subscriber shares what it decoded: Out for an output message,
// State for a status message. Events and what they point to are immutable.
type Event struct {
	ExecID      string           // the execution's msg_id (the message's parent)
	ExecutionID string           // the execution's id (the store's), when the event belongs to one
	Seq         int              // outputs of an execution: 1, 2, ... in order, the same on every path
	Origin      any              // ExecRequest.Origin of that execution; nil when none or unknown
	Msg         *jupyter.Message // a runtime message, or nil
	Out         *Output          // the output Msg carries (iopub outputs only), or nil
	State       string           // the execution_state of a status message, or ""
	Result      *Result          // the finished execution, or nil
}

// Size approximates the bytes the event holds, for byte-counted queues.
func (e Event) Size() int {
	if e.Msg != nil {
		return e.Msg.Size()
	}
	return 512
}

// Control reports whether the event decides when something is finished
// (status, replies, results); queues never make those wait behind bulk
// output.
func (e Event) Control() bool {
	return e.Msg == nil || jupyter.IsControl(e.Msg.Header.MsgType)
}

// Subscriber receives events. Deliver is called from runtime reader
// goroutines and must never block.
type Subscriber interface {
	Deliver(Event)
}

// decode fills the event's decoded parts from its message.
func (e *Event) decode() {
	m := e.Msg
	if m.Channel != jupyter.IOPub {
		return
	}
	if m.Header.MsgType == jupyter.MsgStatus {
		e.State = jupyter.ExecutionState(m.Content)
		return
	}
	if o, ok := Decode(m); ok {
		e.Out = o
	}
}
