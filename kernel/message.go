package kernel

import (
	"github.com/goccy/go-json"
)

// ProtocolVersion is the Jupyter messaging protocol version aiod speaks.
const ProtocolVersion = "5.3"

// Header is a Jupyter message header (also used for parent_header; a
// parent_header of {} decodes to the zero Header).
type Header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// Message is one Jupyter message as aiod handles it, whichever runtime
// produced it. Native REPLs (replbridge) emit the same shapes so that the
// multiplexer and the collector see one protocol.
//
// Metadata and Content stay raw JSON: most messages are routed and
// forwarded far more often than they are inspected.
type Message struct {
	Channel  string          // "shell", "iopub", "control" or "stdin"
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

// Handler receives every message a runtime reads. It is called from the
// runtime's reader goroutines (possibly several at once, one per socket)
// and must never block: hand the message on and return.
type Handler func(*Message)

// ExecuteRequest is one execute_request. MsgID is chosen by the caller so that
// it can subscribe to the replies before the request is sent.
type ExecuteRequest struct {
	MsgID string
	Code  string
	// Silent and NoHistory map to execute_request's silent and !store_history.
	Silent    bool
	NoHistory bool
}

// RuntimeInfo describes a running runtime.
type RuntimeInfo struct {
	Backend  string // "kernel" or "native"
	Language string // "python" or "javascript"
	Name     string // kernelspec name for kernels, interpreter path for native
	PID      int
	Version  string // interpreter version, when known
}
