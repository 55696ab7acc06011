package replbridge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
)

// execution is the one request the driver is running. Guarded by REPL.mu.
type execution struct {
	req     jupyter.ExecuteRequest
	parent  jupyter.Header
	count   int
	marker  []byte
	outSeen bool // end marker seen on stdout
	errSeen bool // end marker seen on stderr
	reply   *driverMsg
	sigint  time.Time // when the last SIGINT for it was sent
}

// driverMsg is one line the driver writes on fd 4.
type driverMsg struct {
	Type    string        `json:"type"`      // "ready", "done", "complete_reply" or "inspect_reply"
	Version string        `json:"version"`   // ready
	Status  string        `json:"status"`    // done: "ok" or "error"
	Result  *string       `json:"result"`    // done: text/plain of the trailing value
	Error   *errorContent `json:"error"`     // done, status error
	Exit    *int          `json:"exit_code"` // done, bash: the exit code of the last command

	ID          string   `json:"id"`           // complete_reply, inspect_reply: the request's
	Matches     []string `json:"matches"`      // complete_reply
	CursorStart int      `json:"cursor_start"` // complete_reply
	CursorEnd   int      `json:"cursor_end"`   // complete_reply
	Found       bool     `json:"found"`        // inspect_reply
	Text        string   `json:"text"`         // inspect_reply: text/plain
}

type errorContent struct {
	Ename     string   `json:"ename"`
	Evalue    string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

type command struct {
	Type   string `json:"type,omitempty"` // "" runs Code; "complete" or "inspect" ask about it
	Code   string `json:"code"`
	Token  string `json:"token,omitempty"`
	Silent bool   `json:"silent,omitempty"`

	ID          string `json:"id,omitempty"`         // complete, inspect
	CursorPos   int    `json:"cursor_pos,omitempty"` // complete, inspect: in code points
	DetailLevel int    `json:"detail_level,omitempty"`
}

// Execute queues req and returns; the execution starts (status busy) once
// the ones before it have finished. Its messages go to the Handler, parented
// to req.MsgID. It fails only when the REPL is closed or dead, or ctx is done.
func (r *REPL) Execute(ctx context.Context, req jupyter.ExecuteRequest) error {
	if req.MsgID == "" {
		return errors.New("execute: empty MsgID")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("execute on %s REPL: %w", r.lang, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil || r.closing || r.exited {
		err := r.err
		if err == nil {
			err = ErrClosed
		}
		return fmt.Errorf("execute on %s REPL: %w", r.lang, err)
	}
	r.queue = append(r.queue, req)
	if r.cur == nil {
		r.startNextLocked()
	}
	return nil
}

// startNextLocked starts the first queued request: busy, execute_input, and
// the command on fd 3. A command that cannot be written kills the process;
// the waiter then reports the death through Done.
func (r *REPL) startNextLocked() {
	if r.cur != nil || len(r.queue) == 0 {
		return
	}
	req := r.queue[0]
	r.queue = r.queue[1:]
	if !req.Silent && !req.NoHistory {
		r.count++
	}
	token := newToken()
	x := &execution{
		req:    req,
		count:  r.count,
		marker: []byte("\x00aiod:end:" + token + "\x00"),
		parent: jupyter.Header{MsgID: req.MsgID, Session: r.session, MsgType: "execute_request", Version: jupyter.ProtocolVersion},
	}
	r.cur, r.last = x, x.parent
	r.emit(jupyter.IOPub, jupyter.MsgStatus, x.parent, jupyter.StatusContent{ExecutionState: jupyter.StateBusy})
	if !req.Silent {
		r.emit("iopub", "execute_input", x.parent, map[string]any{"code": req.Code, "execution_count": x.count})
	}
	if err := r.sendLocked(command{Code: req.Code, Token: token, Silent: req.Silent}); err != nil {
		r.log.Error("send command to native REPL", "pid", r.pid, "err", err)
		if !r.exited {
			syscall.Kill(-r.pid, syscall.SIGKILL)
		}
	}
}

func (r *REPL) sendLocked(c command) error {
	if r.lang == LangBash {
		return r.sendBashLocked(c)
	}
	if r.cmdW == nil {
		return ErrClosed
	}
	line, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode command: %w", err)
	}
	r.cmdW.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := r.cmdW.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("write command: %w", err)
	}
	return nil
}

// maybeFinishLocked ends the current execution once both end markers and the
// driver's done line are in: its result or error, idle, execute_reply. Then
// the next queued request starts.
func (r *REPL) maybeFinishLocked() {
	x := r.cur
	if x == nil || !x.outSeen || !x.errSeen || x.reply == nil {
		return
	}
	r.cur = nil
	d := x.reply
	reply := map[string]any{"status": "ok", "execution_count": x.count, "user_expressions": map[string]any{}, "payload": []any{}}
	switch {
	case d.Exit != nil:
		reply["exit_code"] = *d.Exit
		if *d.Exit != 0 {
			reply["status"] = "error"
		}
	case d.Status == "error" && d.Error != nil:
		r.emit("iopub", "error", x.parent, d.Error)
		reply = map[string]any{"status": "error", "execution_count": x.count,
			"ename": d.Error.Ename, "evalue": d.Error.Evalue, "traceback": d.Error.Traceback}
	case d.Result != nil && !x.req.Silent:
		r.emit("iopub", "execute_result", x.parent, map[string]any{
			"data": map[string]string{"text/plain": *d.Result}, "metadata": map[string]any{}, "execution_count": x.count})
	}
	r.emit(jupyter.IOPub, jupyter.MsgStatus, x.parent, jupyter.StatusContent{ExecutionState: jupyter.StateIdle})
	r.emit("shell", "execute_reply", x.parent, reply)
	r.startNextLocked()
}

// emit builds one message and hands it to the handler (which never blocks).
func (r *REPL) emit(channel, msgType string, parent jupyter.Header, content any) {
	if r.handler == nil {
		return
	}
	body, err := json.Marshal(content)
	if err != nil {
		r.log.Error("encode message content", "msg_type", msgType, "err", err)
		return
	}
	r.handler(&jupyter.Message{
		Channel:  channel,
		Header:   jupyter.NewHeader(r.session, jupyter.NewID(), msgType),
		Parent:   parent,
		Metadata: json.RawMessage("{}"),
		Content:  body,
	})
}

// newToken returns 32 random hex digits.
func newToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Complete asks the interpreter's own completer (Python's rlcompleter,
// with module names after import; Node's REPL completer) for completions
// of code at cursorPos. The driver answers between executions: while code
// runs (synchronous JavaScript, or any Python), the answer waits for it,
// bounded by ctx.
func (r *REPL) Complete(ctx context.Context, code string, cursorPos int) (*jupyter.CompleteReply, error) {
	if r.lang == LangBash { // no completer: nothing found
		return &jupyter.CompleteReply{Status: "ok", Matches: []string{}, CursorStart: cursorPos, CursorEnd: cursorPos,
			Metadata: json.RawMessage("{}")}, nil
	}
	m, err := r.ask(ctx, command{Type: "complete", Code: code, CursorPos: cursorPos})
	if err != nil {
		return nil, err
	}
	matches := m.Matches
	if matches == nil {
		matches = []string{}
	}
	return &jupyter.CompleteReply{Status: "ok", Matches: matches, CursorStart: m.CursorStart, CursorEnd: m.CursorEnd,
		Metadata: json.RawMessage("{}")}, nil
}

// Inspect asks the interpreter about the object at cursorPos: its
// signature and documentation (Python) or what inspecting it shows
// (Node), as text/plain.
func (r *REPL) Inspect(ctx context.Context, code string, cursorPos, detailLevel int) (*jupyter.InspectReply, error) {
	if r.lang == LangBash {
		return &jupyter.InspectReply{Status: "ok", Data: map[string]json.RawMessage{}, Metadata: json.RawMessage("{}")}, nil
	}
	m, err := r.ask(ctx, command{Type: "inspect", Code: code, CursorPos: cursorPos, DetailLevel: detailLevel})
	if err != nil {
		return nil, err
	}
	data := map[string]json.RawMessage{}
	if m.Found {
		data["text/plain"], _ = json.MarshalWithOption(m.Text, json.DisableHTMLEscape())
	}
	return &jupyter.InspectReply{Status: "ok", Found: m.Found, Data: data, Metadata: json.RawMessage("{}")}, nil
}

// ask sends a complete or inspect command and waits for its reply.
func (r *REPL) ask(ctx context.Context, c command) (*driverMsg, error) {
	c.ID = newToken()
	ch := make(chan *driverMsg, 1)
	r.mu.Lock()
	if r.err != nil || r.closing || r.exited {
		err := r.err
		r.mu.Unlock()
		if err == nil {
			err = ErrClosed
		}
		return nil, fmt.Errorf("%s on %s REPL: %w", c.Type, r.lang, err)
	}
	if r.asks == nil {
		r.asks = map[string]chan *driverMsg{}
	}
	r.asks[c.ID] = ch
	err := r.sendLocked(c)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.asks, c.ID)
		r.mu.Unlock()
	}()
	if err != nil {
		return nil, fmt.Errorf("%s on %s REPL: %w", c.Type, r.lang, err)
	}
	select {
	case m := <-ch:
		return m, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s on %s REPL: wait for the answer: %w", c.Type, r.lang, context.Cause(ctx))
	case <-r.done:
		return nil, fmt.Errorf("%s on %s REPL: %w", c.Type, r.lang, r.Err())
	}
}
