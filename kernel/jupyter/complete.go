package jupyter

import (
	"context"
	"fmt"

	"github.com/goccy/go-json"
)

// CompleteReply is a complete_reply's content: Matches replace the code
// from CursorStart to CursorEnd (unicode code points, protocol 5.2+).
type CompleteReply struct {
	Status      string          `json:"status"`
	Matches     []string        `json:"matches"`
	CursorStart int             `json:"cursor_start"`
	CursorEnd   int             `json:"cursor_end"`
	Metadata    json.RawMessage `json:"metadata"`
}

// InspectReply is an inspect_reply's content: Data is a MIME bundle
// (text/plain at least) about the object at the cursor.
type InspectReply struct {
	Status   string                     `json:"status"`
	Found    bool                       `json:"found"`
	Data     map[string]json.RawMessage `json:"data"`
	Metadata json.RawMessage            `json:"metadata"`
}

// Completer is a Runtime that completes code and inspects the object at a
// cursor: every runtime of aiod (a kernel answers complete_request and
// inspect_request; a native REPL asks its interpreter's own completer).
// While the runtime runs code, the answer waits for it (bounded by ctx).
type Completer interface {
	Complete(ctx context.Context, code string, cursorPos int) (*CompleteReply, error)
	Inspect(ctx context.Context, code string, cursorPos, detailLevel int) (*InspectReply, error)
}

// RequestFunc sends a client's own request and returns its reply of type
// replyType, keeping it from the Handler; kernels implement it on top of
// Replies.
type RequestFunc func(ctx context.Context, m *Message, replyType string) (*Message, error)

// Complete asks for completions through do, in client session.
func Complete(ctx context.Context, do RequestFunc, session, code string, cursorPos int) (*CompleteReply, error) {
	content, _ := json.Marshal(map[string]any{"code": code, "cursor_pos": cursorPos})
	r, err := do(ctx, NewMessage(Shell, session, MsgCompleteRequest, content), MsgCompleteReply)
	if err != nil {
		return nil, fmt.Errorf("complete_request: %w", err)
	}
	var c CompleteReply
	if err := json.Unmarshal(r.Content, &c); err != nil {
		return nil, fmt.Errorf("complete_reply: %w", err)
	}
	if c.Matches == nil {
		c.Matches = []string{}
	}
	return &c, nil
}

// Inspect asks about the object at the cursor through do, in client
// session.
func Inspect(ctx context.Context, do RequestFunc, session, code string, cursorPos, detailLevel int) (*InspectReply, error) {
	content, _ := json.Marshal(map[string]any{"code": code, "cursor_pos": cursorPos, "detail_level": detailLevel})
	r, err := do(ctx, NewMessage(Shell, session, MsgInspectRequest, content), MsgInspectReply)
	if err != nil {
		return nil, fmt.Errorf("inspect_request: %w", err)
	}
	var c InspectReply
	if err := json.Unmarshal(r.Content, &c); err != nil {
		return nil, fmt.Errorf("inspect_reply: %w", err)
	}
	if c.Data == nil {
		c.Data = map[string]json.RawMessage{}
	}
	return &c, nil
}

// Await waits on replies (given to Replies.Expect for m) for the first
// message of replyType, until ctx ends or ended is closed (then endErr
// says why).
func Await(ctx context.Context, replies <-chan *Message, replyType string, ended <-chan struct{}, endErr func() error) (*Message, error) {
	for {
		select {
		case r := <-replies:
			if r.Header.MsgType == replyType {
				return r, nil
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for %s: %w", replyType, context.Cause(ctx))
		case <-ended:
			return nil, fmt.Errorf("wait for %s: %w", replyType, endErr())
		}
	}
}
