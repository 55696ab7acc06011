package execution

import (
	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
)

// Event is what a subscriber receives: a message of the session's runtime,
// or the final result of one execution (Msg nil, Result set).
//
// The mux decodes a message once, on the runtime's reader goroutine, and
// every subscriber shares what it decoded: Out for an output message,
// State for a status message. Events and what they point to are immutable.
//
// An event may carry Out with Msg nil: an output no iopub message carries,
// the display_data a reply's pager payload (help: len?) becomes. The mux
// hands it on before the reply, so that every route sees the same output;
// subscribers that forward raw messages (the Jupyter channels) skip it.
type Event struct {
	ExecID      string           // the execution's msg_id (the message's parent)
	ExecutionID string           // the execution's id (the store's), when the event belongs to one
	Seq         int              // outputs of an execution: 1, 2, ... in order, the same on every path
	Origin      any              // ExecRequest.Origin of that execution; nil when none or unknown
	Msg         *jupyter.Message // a runtime message, or nil
	Out         *Output          // the output Msg carries (iopub outputs only), or nil
	State       string           // the execution_state of a status message, or ""
	Result      *Result          // the finished execution, or nil

	// An execute_reply, decoded (by Parse): its content, the outputs its
	// pager payloads become and the text of a set_next_input payload.
	Reply     *jupyter.ExecuteReplyContent
	Pages     []*Output
	NextInput string
}

// Size approximates the bytes the event holds, for byte-counted queues.
func (e Event) Size() int {
	switch {
	case e.Msg != nil:
		return e.Msg.Size()
	case e.Out != nil:
		return 256 + bundleSize(e.Out.Data) + len(e.Out.Metadata)
	}
	return 512
}

// Control reports whether the event decides when something is finished
// (status, replies, results); queues never make those wait behind bulk
// output.
func (e Event) Control() bool {
	if e.Msg == nil {
		return e.Out == nil
	}
	return jupyter.IsControl(e.Msg.Header.MsgType)
}

// Subscriber receives events. Deliver is called from runtime reader
// goroutines and must never block.
type Subscriber interface {
	Deliver(Event)
}

// Parse fills the event's decoded parts from its message.
func (e *Event) Parse() {
	m := e.Msg
	if m.Header.MsgType == jupyter.MsgExecuteReply {
		var c jupyter.ExecuteReplyContent
		_ = json.Unmarshal(m.Content, &c)
		e.Reply = &c
		e.Pages, e.NextInput = decodePayloads(c.Payload)
		return
	}
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
