package jupyter

import (
	"bytes"
	"fmt"

	"github.com/goccy/go-json"
)

// ProtocolVersion is the Jupyter messaging protocol version aiod speaks.
const ProtocolVersion = "5.3"

// Channels.
const (
	Shell   = "shell"
	IOPub   = "iopub"
	Control = "control"
	Stdin   = "stdin"
)

// Message types aiod reads or writes.
const (
	MsgExecuteRequest    = "execute_request"
	MsgExecuteReply      = "execute_reply"
	MsgExecuteInput      = "execute_input"
	MsgKernelInfoRequest = "kernel_info_request"
	MsgKernelInfoReply   = "kernel_info_reply"
	MsgShutdownRequest   = "shutdown_request"
	MsgShutdownReply     = "shutdown_reply"
	MsgInterruptRequest  = "interrupt_request"
	MsgInterruptReply    = "interrupt_reply"
	MsgStatus            = "status"
	MsgStream            = "stream"
	MsgExecuteResult     = "execute_result"
	MsgDisplayData       = "display_data"
	MsgUpdateDisplayData = "update_display_data"
	MsgClearOutput       = "clear_output"
	MsgError             = "error"
	MsgCompleteRequest   = "complete_request"
	MsgCompleteReply     = "complete_reply"
	MsgInspectRequest    = "inspect_request"
	MsgInspectReply      = "inspect_reply"
	MsgInputRequest      = "input_request"
	MsgCommOpen          = "comm_open"
	MsgCommMsg           = "comm_msg"
	MsgCommClose         = "comm_close"
	MsgHistoryRequest    = "history_request"
	MsgIsCompleteRequest = "is_complete_request"
	MsgCommInfoRequest   = "comm_info_request"
	MsgDebugRequest      = "debug_request"
)

// Execution states of iopub status messages (and of a kernel as Jupyter
// Server reports it).
const (
	StateStarting   = "starting"
	StateBusy       = "busy"
	StateIdle       = "idle"
	StateRestarting = "restarting"
	StateDead       = "dead"
)

// IsOutput reports whether msgType is an iopub message that changes what a
// notebook shows: stream, execute_result, display_data, error, clear_output
// and update_display_data. It is the one list of output message types.
func IsOutput(msgType string) bool {
	switch msgType {
	case MsgStream, MsgExecuteResult, MsgDisplayData, MsgError, MsgClearOutput, MsgUpdateDisplayData:
		return true
	}
	return false
}

// IsControl reports whether msgType decides when something is finished
// (status and the replies a client waits for). Queues never make such a
// message wait behind bulk output.
func IsControl(msgType string) bool {
	switch msgType {
	case MsgStatus, MsgExecuteReply, MsgShutdownReply, MsgInterruptReply, MsgKernelInfoReply:
		return true
	}
	return false
}

// Header is a message header (also used for parent_header; a parent_header
// of {} decodes to the zero Header).
type Header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// Message is one Jupyter message as aiod handles it, whichever runtime
// produced it. Native REPLs emit the same shapes, so that the multiplexer
// and the collector see one protocol.
//
// Metadata and Content stay raw JSON: most messages are routed and
// forwarded far more often than they are inspected.
type Message struct {
	Channel  string          // Shell, IOPub, Control or Stdin
	Header   Header          // header
	Parent   Header          // parent_header; Parent.MsgID == "" when it was {}
	Metadata json.RawMessage // a JSON object; nil means {}
	Content  json.RawMessage // a JSON object; nil means {}
	Buffers  [][]byte        // binary buffers, rarely present
}

// Size approximates the bytes a message holds, for byte-counted queues.
func (m *Message) Size() int {
	n := 256 + len(m.Metadata) + len(m.Content)
	for _, b := range m.Buffers {
		n += len(b)
	}
	return n
}

var emptyObject = []byte("{}")

// Parts returns the four JSON parts of m as they go on any wire: header,
// parent_header ({} when zero), metadata and content ({} when nil).
func (m *Message) Parts() (header, parent, metadata, content []byte, err error) {
	if header, err = json.Marshal(&m.Header); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("encode header: %w", err)
	}
	parent = emptyObject
	if m.Parent != (Header{}) {
		if parent, err = json.Marshal(&m.Parent); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("encode parent_header: %w", err)
		}
	}
	return header, parent, orEmpty(m.Metadata), orEmpty(m.Content), nil
}

func orEmpty(b json.RawMessage) []byte {
	if len(b) == 0 {
		return emptyObject
	}
	return b
}

// LooksLikeObject reports whether b looks like a JSON object: it starts
// with '{' and ends with '}'. Full validation is left to whoever decodes
// the part: go-json's Valid is quadratic on long strings with escapes, and
// a 20 MB stream message took 16 s to validate.
func LooksLikeObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 1 && b[0] == '{' && b[len(b)-1] == '}'
}

// Handler receives every message a runtime reads. It is called from the
// runtime's reader goroutines (possibly several at once, one per socket)
// and must never block: hand the message on and return.
type Handler func(*Message)
