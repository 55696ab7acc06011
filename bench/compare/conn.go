package compare

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/goccy/go-json"
)

// execConn runs code on a kernel and returns its stdout once the execution
// is over (its execute_reply and its iopub idle both arrived). Safe for
// concurrent use; the kernel queues concurrent executions.
type execConn interface {
	exec(ctx context.Context, code string) (string, error)
}

// router matches kernel messages to the executions waiting for them, by
// parent msg_id.
type router struct {
	mu sync.Mutex
	m  map[string]*pending
}

type pending struct {
	stdout      strings.Builder
	status      string // execute_reply's
	reply, idle bool
	done        chan struct{}
}

func newRouter() *router { return &router{m: map[string]*pending{}} }

func (r *router) add(id string) *pending {
	p := &pending{done: make(chan struct{})}
	r.mu.Lock()
	r.m[id] = p
	r.mu.Unlock()
	return p
}

func (r *router) remove(id string) {
	r.mu.Lock()
	delete(r.m, id)
	r.mu.Unlock()
}

// on takes one message; it never blocks.
func (r *router) on(parent, msgType string, content []byte) {
	if parent == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.m[parent]
	if p == nil || p.reply && p.idle {
		return
	}
	switch msgType {
	case "stream":
		var c struct{ Name, Text string }
		if json.Unmarshal(content, &c) == nil && c.Name == "stdout" {
			p.stdout.WriteString(c.Text)
		}
	case "execute_reply":
		var c struct{ Status string }
		_ = json.Unmarshal(content, &c)
		p.status, p.reply = c.Status, true
	case "status":
		var c struct {
			State string `json:"execution_state"`
		}
		if json.Unmarshal(content, &c) == nil && c.State == "idle" {
			p.idle = true
		}
	default:
		return
	}
	if p.reply && p.idle {
		close(p.done)
	}
}

// wait blocks until p is over and returns its stdout.
func (r *router) wait(ctx context.Context, id string, p *pending) (string, error) {
	defer r.remove(id)
	select {
	case <-p.done:
	case <-ctx.Done():
		return "", fmt.Errorf("execution %s not over: %w", id, ctx.Err())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.status != "ok" {
		return "", fmt.Errorf("execution %s: status %q", id, p.status)
	}
	return p.stdout.String(), nil
}

// tokenCode is the load package's convention: the code, then a line
// printing the call's token.
func tokenCode(code, tok, language string) string {
	if code != "" && !strings.HasSuffix(code, "\n") {
		code += "\n"
	}
	if language == "javascript" {
		return code + "console.log('" + tok + "')"
	}
	return code + "print('" + tok + "')"
}

// checkToken says whether out is the answer of the call that printed tok.
func checkToken(out, tok string) error {
	if !strings.HasSuffix(out, tok+"\n") {
		return fmt.Errorf("stdout lacks the call's token %s: %.200q", tok, out)
	}
	if strings.Count(out, "aiobench-") != 1 {
		return fmt.Errorf("stdout holds another call's output: %.200q", out)
	}
	return nil
}
