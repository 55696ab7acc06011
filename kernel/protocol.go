package kernel

import (
	"bytes"
	"fmt"

	"github.com/goccy/go-json"
)

// This file holds the parts of the Jupyter protocol that every transport
// shares: the zmq4 wire (this package) and the Jupyter Server WebSocket
// (package remote).

// KernelInfoReply is the part of kernel_info_reply's content aiod reads.
type KernelInfoReply struct {
	ProtocolVersion string `json:"protocol_version"`
	Implementation  string `json:"implementation"`
	LanguageInfo    struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"language_info"`
}

type executeContent struct {
	Code            string            `json:"code"`
	Silent          bool              `json:"silent"`
	StoreHistory    bool              `json:"store_history"`
	UserExpressions map[string]string `json:"user_expressions"`
	AllowStdin      bool              `json:"allow_stdin"`
	StopOnError     bool              `json:"stop_on_error"`
}

// NewExecuteRequest builds the shell execute_request for req in client
// session: allow_stdin false, and stop_on_error false. aiod already runs one
// request at a time per kernel, and with stop_on_error true ipykernel 6
// aborts the next request when it arrives within its abort window after an
// error, so an agent's follow-up call after a failing cell would be refused.
func NewExecuteRequest(session string, req ExecuteRequest) (*Message, error) {
	if req.MsgID == "" {
		return nil, fmt.Errorf("execute_request: empty msg_id")
	}
	content, err := json.Marshal(executeContent{
		Code:            req.Code,
		Silent:          req.Silent,
		StoreHistory:    !req.NoHistory,
		UserExpressions: map[string]string{},
	})
	if err != nil {
		return nil, fmt.Errorf("execute_request: %w", err)
	}
	return &Message{Channel: "shell", Header: NewHeader(session, req.MsgID, "execute_request"), Content: content}, nil
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
