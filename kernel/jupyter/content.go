package jupyter

import (
	"fmt"

	"github.com/goccy/go-json"
)

// This file holds the contents aiod reads and writes, typed.

// StatusContent is an iopub status message's content.
type StatusContent struct {
	ExecutionState string `json:"execution_state"`
}

// ExecuteReplyContent is the part of execute_reply's content aiod reads.
type ExecuteReplyContent struct {
	Status         string          `json:"status"` // ok, error or aborted
	ExecutionCount *int            `json:"execution_count"`
	Ename          string          `json:"ename"`
	Evalue         string          `json:"evalue"`
	Payload        json.RawMessage `json:"payload"`
	ExitCode       *int            `json:"exit_code,omitempty"` // bash: the exit code of the last command
}

// StreamContent is a stream message's content.
type StreamContent struct {
	Name string `json:"name"` // stdout or stderr
	Text string `json:"text"`
}

// ErrorContent is an error message's content (and the error part of an
// execute_reply).
type ErrorContent struct {
	Ename     string   `json:"ename"`
	Evalue    string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

// DisplayContent is the content of execute_result, display_data and
// update_display_data (ExecutionCount only on execute_result).
type DisplayContent struct {
	Data           map[string]json.RawMessage `json:"data"`
	Metadata       json.RawMessage            `json:"metadata"`
	ExecutionCount *int                       `json:"execution_count,omitempty"`
	Transient      Transient                  `json:"transient"`
}

// Transient holds the display_id of display_data and update_display_data.
type Transient struct {
	DisplayID string `json:"display_id,omitempty"`
}

// ClearOutputContent is a clear_output message's content.
type ClearOutputContent struct {
	Wait bool `json:"wait"`
}

// KernelInfoReply is the part of kernel_info_reply's content aiod reads.
type KernelInfoReply struct {
	ProtocolVersion string `json:"protocol_version"`
	Implementation  string `json:"implementation"`
	LanguageInfo    struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"language_info"`
}

// ExecuteRequest is one execute_request. MsgID is chosen by the caller so
// that it can subscribe to the replies before the request is sent.
type ExecuteRequest struct {
	MsgID string
	Code  string
	// Silent and NoHistory map to execute_request's silent and !store_history.
	Silent    bool
	NoHistory bool
	// UserExpressions are evaluated after the code (name -> expression):
	// plain eval in the user namespace, so a large argument does not pass
	// through the cell machinery. Kernels only; native REPLs ignore them.
	UserExpressions map[string]string
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
	ue := req.UserExpressions
	if ue == nil {
		ue = map[string]string{}
	}
	content, err := json.Marshal(executeContent{
		Code:            req.Code,
		Silent:          req.Silent,
		StoreHistory:    !req.NoHistory,
		UserExpressions: ue,
	})
	if err != nil {
		return nil, fmt.Errorf("execute_request: %w", err)
	}
	return &Message{Channel: Shell, Header: NewHeader(session, req.MsgID, MsgExecuteRequest), Content: content}, nil
}

// NewStatus returns an iopub status message with no parent, the way a
// Jupyter server announces a kernel starting, restarting or dead.
func NewStatus(state string) *Message {
	content, _ := json.Marshal(StatusContent{ExecutionState: state})
	return NewMessage(IOPub, Username, MsgStatus, content)
}

// ExecutionState returns the execution_state of a status message's
// content, or "" when it has none.
func ExecutionState(content []byte) string {
	var st StatusContent
	if json.Unmarshal(content, &st) != nil {
		return ""
	}
	return st.ExecutionState
}
