package terminals

import (
	"strconv"
	"sync"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/gateway/wsock"
)

// ShellSocketRoute is the agent_sandbox reference's terminal WebSocket
// (website/docs/en/examples/terminal.md). The client sends {"type":
// "input", "data": text}, {"type": "resize", "data": {"cols", "rows"}} and
// {"type": "pong"}; aiod sends {"type": "session_id", "data": name},
// {"type": "ready", "data": "Terminal ready"}, the recent screen and every
// later output as {"type": "output", "data": text}, {"type": "ping",
// "timestamp": ms} every shellPing, {"type": "error", "data": why} for a
// message it cannot take, and {"type": "exit", "data": why} when the
// shell ends. Its terminals are the Jupyter terminals API's (same names,
// caps and sandbox); ?session_id=NAME attaches to that one, starting it
// when there is none. One opened here is closed shellIdle after its last
// socket, since the reference's clients make a new one after a failure.
const ShellSocketRoute = "/v1/shell/ws"

const (
	shellPing = 30 * time.Second
	shellIdle = 2 * time.Minute
)

// shellMsg is a message of the shell socket, either way.
type shellMsg struct {
	Type      string          `json:"type"`
	Data      json.RawMessage `json:"data,omitempty"`
	Timestamp int64           `json:"timestamp,omitempty"`
}

func shellFrame(typ string, data any) []byte {
	d, _ := api.Marshal(data)
	b, _ := api.Marshal(shellMsg{Type: typ, Data: d})
	return b
}

// GET /v1/shell/ws[?session_id=NAME]
func (s *Surface) shellSocket(ctx *fasthttp.RequestCtx) {
	name := string(ctx.QueryArgs().Peek("session_id"))
	if name != "" {
		if fe := call.ValidSessionID("session_id", name); fe != nil {
			fe.In = "query"
			api.InvalidV1(ctx, fe)
			return
		}
	}
	tm, status, msg := s.open(call.Tenant(ctx), name, "", shellIdle)
	if tm == nil {
		api.Fail(ctx, status, msg)
		return
	}
	s.hub.Upgrade(ctx, ShellSocketRoute, nil, func(wc *wsock.Conn) {
		detach := attach(wc, tm, func(text string) []byte { return shellFrame("output", text) },
			shellFrame("session_id", tm.name), shellFrame("ready", "Terminal ready"))
		defer detach()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // pings, and the shell's end ends the socket
			defer wg.Done()
			tick := time.NewTicker(shellPing)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					b, _ := api.Marshal(shellMsg{Type: "ping", Timestamp: time.Now().UnixMilli()})
					wc.Push(wsock.Item{Raw: b})
				case <-tm.t.Done():
					wc.Push(wsock.Item{Raw: shellFrame("exit", "the shell ended")})
					select {
					case <-time.After(2 * time.Second): // time for the message to leave the queue
						wc.CloseWith(wsock.CloseNormal, "the shell ended", "terminal_ended")
					case <-stop:
					}
					return
				case <-stop:
					return
				}
			}
		}()
		defer wg.Wait()
		defer close(stop)
		serve(wc, func(b []byte) {
			if why := s.shellInput(tm, b); why != "" {
				wc.Drop("bad_client_message", 1)
				wc.Push(wsock.Item{Raw: shellFrame("error", why)})
			}
		})
	})
}

// shellInput takes one client message of the shell socket; it returns why
// it could not.
func (s *Surface) shellInput(tm *terminal, b []byte) string {
	var m shellMsg
	if json.Unmarshal(b, &m) != nil {
		return "a message is a JSON object with a type: input, resize or pong"
	}
	switch m.Type {
	case "input":
		var text string
		if json.Unmarshal(m.Data, &text) != nil {
			return "input: data must be a string, the terminal's input (a command ends with \\n)"
		}
		if err := tm.t.Write([]byte(text)); err != nil {
			return "input: " + err.Error()
		}
	case "resize":
		var size struct{ Cols, Rows int }
		if json.Unmarshal(m.Data, &size) != nil || size.Cols <= 0 || size.Rows <= 0 || size.Cols > 1000 || size.Rows > 1000 {
			return "resize: data must be {\"cols\": 1-1000, \"rows\": 1-1000}"
		}
		_ = tm.t.Resize(uint16(size.Rows), uint16(size.Cols))
	case "pong":
	default:
		return "unknown message type " + strconv.Quote(m.Type) + ": want input, resize or pong"
	}
	return ""
}
