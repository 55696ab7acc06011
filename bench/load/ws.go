package load

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/coder/websocket"
	"github.com/goccy/go-json"
)

// wsCaller sends executions over one /v2/code/ws socket, one at a time.
type wsCaller struct {
	cfg  Config
	conn *websocket.Conn
	next atomic.Int64
	buf  bytes.Buffer // each message is read into it: one caller, one call at a time
}

func dialWS(ctx context.Context, cfg Config) (caller, error) {
	u := "ws" + strings.TrimPrefix(cfg.URL, "http") + "/v2/code/ws"
	h := http.Header{}
	if cfg.Token != "" {
		h.Set("Authorization", "Bearer "+cfg.Token)
	}
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", u, err)
	}
	c.SetReadLimit(64 << 20)
	return &wsCaller{cfg: cfg, conn: c}, nil
}

// execRequest is a call's request: the body of POST /v2/code/execute, or
// the WebSocket's execute message (with Type and ID). A struct, not a map:
// the load generator shares the machine with what it measures.
type execRequest struct {
	Type      string  `json:"type,omitempty"`
	ID        string  `json:"id,omitempty"`
	Language  string  `json:"language"`
	Code      string  `json:"code"`
	Timeout   float64 `json:"timeout"`
	SessionID string  `json:"session_id,omitempty"`
}

// wsMessage is what the checks read of a server message: one decode per
// message (the load generator shares the machine with what it measures).
type wsMessage struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Success bool   `json:"success"`
	Message string `json:"message"`
	Status  int    `json:"status"`
	Data    *struct {
		Status string `json:"status"`
		Stdout string `json:"stdout"`
	} `json:"data"`
	Output struct {
		OutputType string `json:"output_type"`
		Name       string `json:"name"`
		Text       string `json:"text"`
	} `json:"output"`
}

func (w *wsCaller) call(ctx context.Context, code, session string) (string, error) {
	id := "c" + strconv.FormatInt(w.next.Add(1), 10)
	raw, _ := json.Marshal(execRequest{Type: "execute", ID: id, Language: w.cfg.Language, Code: code, Timeout: w.cfg.Timeout, SessionID: session})
	// The library arms a timer for every read and write given a context
	// that can end (four a call); one per call does: ctx's end closes
	// the socket, as the library's own timers would.
	stop := context.AfterFunc(ctx, func() { _ = w.conn.CloseNow() })
	defer stop()
	fail := func(err error) (string, error) {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", err
	}
	if err := w.conn.Write(context.Background(), websocket.MessageText, raw); err != nil {
		return fail(err)
	}
	var streamed strings.Builder
	for {
		_, r, err := w.conn.Reader(context.Background())
		if err != nil {
			return fail(err)
		}
		w.buf.Reset()
		if _, err := w.buf.ReadFrom(r); err != nil {
			return fail(err)
		}
		b := w.buf.Bytes()
		var m wsMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return "", &statusError{"not_json", fmt.Sprintf("message is not JSON: %.200q", b)}
		}
		if m.ID != id {
			continue
		}
		switch m.Type {
		case "output":
			if m.Output.OutputType == "stream" && m.Output.Name == "stdout" {
				streamed.WriteString(m.Output.Text)
			}
		case "error":
			return "", &statusError{fmt.Sprintf("ws_%d", m.Status), "error message: " + m.Message}
		case "result":
			a := execAnswer{Success: m.Success, Message: m.Message, Data: m.Data}
			out, err := a.verify(http.StatusOK)
			if err == nil && out != streamed.String() {
				return "", &wrongAnswer{fmt.Sprintf("streamed stdout %.100q differs from the result's %.100q", streamed.String(), out)}
			}
			return out, err
		}
	}
}

func (w *wsCaller) close() { _ = w.conn.Close(websocket.StatusNormalClosure, "done") }
