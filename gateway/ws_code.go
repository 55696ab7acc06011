package gateway

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/aiod/aiod/stream"
	"github.com/coder/websocket"
	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
)

// GET /v2/code/ws: aiod's own streaming protocol, JSON text messages.
//
//	client {"type":"execute","id":REF,"language":…,"code":…,"session_id":…,"timeout":…}
//	server {"type":"output","id":REF,"seq":N,"output":{compact output}}   one per output, as sent
//	       {"type":"result","id":REF,"success":…,"message":…,"data":{POST /v2/code/execute's data}}
//	client {"type":"interrupt","id":REF,"session_id":…,"language":…}
//	client {"type":"watch","id":REF,"session_id":…} / {"type":"unwatch",…}
//	server {"type":"ok","id":REF,"request":"interrupt"|"watch"|"unwatch"}
//	       watched: output, status ({"state":"busy"|"idle"|…}) and result messages
//	       with "id" = the execution's msg_id and "session_id"
//	       {"type":"error","id":REF,"status":422|404|409|503,"message":…}

// codeWS upgrades GET /v2/code/ws.
func (h *liveHub) codeWS(ctx *fasthttp.RequestCtx) {
	h.upgrade(ctx, nil, func(c *websocket.Conn, fw *flushWriter, done <-chan struct{}) {
		wc := h.newConn(c, fw, wsRouteCode)
		cs := &codeSocket{wc: wc, watches: map[*stream.Session]*watchSub{}}
		wc.render = cs.render
		wc.run(done, cs.read)
		for sess, w := range cs.watches {
			sess.Mux().Unwatch(w)
		}
	})
}

// codeSocket is the protocol state of one /v2/code/ws socket.
type codeSocket struct {
	wc      *wsConn
	watches map[*stream.Session]*watchSub // reader goroutine only
	seq     map[string]int                // writer goroutine only: outputs sent per execution
}

// read is the socket's reader: it handles one client message at a time and
// never waits for an execution.
func (cs *codeSocket) read(ctx context.Context) error {
	for {
		typ, b, err := cs.wc.c.Read(ctx)
		if err != nil {
			return err
		}
		if typ != websocket.MessageText {
			cs.fail(nil, fasthttp.StatusUnprocessableEntity, "send JSON text messages, not binary ones")
			continue
		}
		cs.handle(b)
	}
}

type codeHead struct {
	Type      string          `json:"type"`
	ID        json.RawMessage `json:"id"`
	SessionID *string         `json:"session_id"`
	Language  *string         `json:"language"`
}

func (cs *codeSocket) handle(b []byte) {
	var head codeHead
	if err := json.Unmarshal(b, &head); err != nil {
		cs.fail(nil, fasthttp.StatusUnprocessableEntity, "message is not a JSON object: "+err.Error())
		return
	}
	ref := head.ID
	if len(ref) > 0 && !wsValidRef(ref) {
		cs.fail(nil, fasthttp.StatusUnprocessableEntity, "field 'id': must be a string or a number")
		return
	}
	if string(ref) == "null" {
		ref = nil
	}
	switch head.Type {
	case "execute":
		cs.execute(ref, b)
	case "interrupt":
		cs.interrupt(ref, head)
	case "watch":
		cs.watch(ref, head)
	case "unwatch":
		cs.unwatch(ref, head)
	case "":
		cs.fail(ref, fasthttp.StatusUnprocessableEntity, "field 'type': is required (execute, interrupt, watch or unwatch)")
	default:
		cs.fail(ref, fasthttp.StatusUnprocessableEntity, fmt.Sprintf("field 'type': unknown message type %q (use execute, interrupt, watch or unwatch)", head.Type))
	}
}

func wsValidRef(r json.RawMessage) bool {
	r = bytes.TrimSpace(r)
	if len(r) == 0 {
		return false
	}
	switch c := r[0]; {
	case c == '"', c == '-', c >= '0' && c <= '9', string(r) == "null":
		return len(r) <= 256
	}
	return false
}

func (cs *codeSocket) execute(ref json.RawMessage, b []byte) {
	h := cs.wc.hub
	if ref == nil {
		cs.fail(nil, fasthttp.StatusUnprocessableEntity, "field 'id': is required, so that outputs and the result can name their execution")
		return
	}
	call, fe := h.s.parseV2Execute(b)
	if fe != nil {
		cs.fail(ref, fasthttp.StatusUnprocessableEntity, fe.Error())
		return
	}
	if int(cs.wc.inflight.Load()) >= cs.wc.lim.MaxInFlight {
		cs.fail(ref, fasthttp.StatusServiceUnavailable, fmt.Sprintf("this socket already has %d executions in flight (the limit); wait for a result", cs.wc.lim.MaxInFlight))
		return
	}
	ref = append(json.RawMessage(nil), ref...)
	call.Origin = cs
	call.Subs = []stream.Subscriber{&execSub{wc: cs.wc, ref: ref}}
	cs.wc.inflight.Add(1)
	ok := h.goExec(func() {
		defer cs.wc.inflight.Add(-1)
		// The execution does not depend on the socket: closing the socket
		// does not stop it.
		res, ce := h.s.execute(h.ctx, call)
		if ce != nil {
			cs.fail(ref, ce.Status, ce.Msg)
			return
		}
		cs.wc.push(wsItem{ev: stream.Event{ExecID: res.ID, Result: res}, ref: ref})
	})
	if !ok {
		cs.wc.inflight.Add(-1)
		cs.fail(ref, fasthttp.StatusServiceUnavailable, "aiod is shutting down")
	}
}

// sessionsNamed returns the sessions with that id, of one language or all.
func (cs *codeSocket) sessionsNamed(id string, lang *string) []*stream.Session {
	reg := cs.wc.hub.s.reg
	if lang != nil {
		if s := reg.Get(*lang, id); s != nil {
			return []*stream.Session{s}
		}
		return nil
	}
	var out []*stream.Session
	for _, l := range []string{"python", "javascript"} {
		if s := reg.Get(l, id); s != nil {
			out = append(out, s)
		}
	}
	return out
}

func (cs *codeSocket) target(ref json.RawMessage, head codeHead) ([]*stream.Session, bool) {
	if head.SessionID == nil || *head.SessionID == "" {
		cs.fail(ref, fasthttp.StatusUnprocessableEntity, "field 'session_id': is required")
		return nil, false
	}
	if head.Language != nil && !codeLanguages[*head.Language] {
		cs.fail(ref, fasthttp.StatusUnprocessableEntity, fmt.Sprintf("field 'language': unsupported language %q: use python or javascript", *head.Language))
		return nil, false
	}
	ss := cs.sessionsNamed(*head.SessionID, head.Language)
	if len(ss) == 0 {
		cs.fail(ref, fasthttp.StatusNotFound, fmt.Sprintf("session %q not found", *head.SessionID))
		return nil, false
	}
	return ss, true
}

func (cs *codeSocket) interrupt(ref json.RawMessage, head codeHead) {
	ss, ok := cs.target(ref, head)
	if !ok {
		return
	}
	for _, s := range ss {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.Interrupt(ctx)
		cancel()
		if err != nil {
			cs.fail(ref, fasthttp.StatusServiceUnavailable, err.Error())
			return
		}
	}
	cs.ok(ref, "interrupt")
}

func (cs *codeSocket) watch(ref json.RawMessage, head codeHead) {
	ss, ok := cs.target(ref, head)
	if !ok {
		return
	}
	for _, s := range ss {
		if cs.watches[s] == nil {
			w := &watchSub{cs: cs, sid: s.ID}
			cs.watches[s] = w
			s.Mux().Watch(w)
		}
	}
	cs.ok(ref, "watch")
}

func (cs *codeSocket) unwatch(ref json.RawMessage, head codeHead) {
	if head.SessionID == nil || *head.SessionID == "" {
		cs.fail(ref, fasthttp.StatusUnprocessableEntity, "field 'session_id': is required")
		return
	}
	n := 0
	for s, w := range cs.watches {
		if s.ID == *head.SessionID && (head.Language == nil || s.Language == *head.Language) {
			s.Mux().Unwatch(w)
			delete(cs.watches, s)
			n++
		}
	}
	if n == 0 {
		cs.fail(ref, fasthttp.StatusNotFound, fmt.Sprintf("this socket does not watch session %q", *head.SessionID))
		return
	}
	cs.ok(ref, "unwatch")
}

type wsError struct {
	Type    string          `json:"type"`
	ID      json.RawMessage `json:"id"`
	Status  int             `json:"status"`
	Message string          `json:"message"`
}

func (cs *codeSocket) fail(ref json.RawMessage, status int, msg string) {
	if ref == nil {
		ref = json.RawMessage("null")
	}
	b, _ := json.MarshalNoEscape(wsError{"error", ref, status, msg})
	cs.wc.push(wsItem{raw: b})
}

func (cs *codeSocket) ok(ref json.RawMessage, request string) {
	if ref == nil {
		ref = json.RawMessage("null")
	}
	b, _ := json.MarshalNoEscape(struct {
		Type    string          `json:"type"`
		ID      json.RawMessage `json:"id"`
		Request string          `json:"request"`
	}{"ok", ref, request})
	cs.wc.push(wsItem{raw: b})
}

// execSub receives the events of one execution started over the socket.
// The result is pushed by the execution's goroutine, after every output.
type execSub struct {
	wc  *wsConn
	ref json.RawMessage
}

func (e *execSub) Deliver(ev stream.Event) {
	if ev.Out != nil {
		e.wc.push(wsItem{ev: ev, ref: e.ref})
	}
}

// watchSub receives every event of a watched session. The socket's own
// executions are left out: they already arrive under the client's id.
type watchSub struct {
	cs  *codeSocket
	sid string
}

func (w *watchSub) Deliver(ev stream.Event) {
	if ev.Origin == w.cs {
		return
	}
	if ev.Result != nil || ev.State != "" || ev.Out != nil {
		w.cs.wc.push(wsItem{ev: ev, sid: w.sid})
	}
}

// Rendered messages.
type wsOutput struct {
	Type      string          `json:"type"`
	ID        json.RawMessage `json:"id"`
	SessionID *string         `json:"session_id,omitempty"`
	Seq       int             `json:"seq"`
	Output    any             `json:"output"`
}

type wsResult struct {
	Type      string          `json:"type"`
	ID        json.RawMessage `json:"id"`
	SessionID *string         `json:"session_id,omitempty"`
	Success   bool            `json:"success"`
	Message   string          `json:"message"`
	Data      any             `json:"data"`
}

type wsStatus struct {
	Type      string          `json:"type"`
	ID        json.RawMessage `json:"id"`
	SessionID *string         `json:"session_id,omitempty"`
	State     string          `json:"state"`
}

// render turns a queued item into a text message (writer goroutine).
func (cs *codeSocket) render(it *wsItem) (websocket.MessageType, []byte, bool) {
	if it.raw != nil {
		return websocket.MessageText, it.raw, true
	}
	if cs.seq == nil {
		cs.seq = map[string]int{}
	}
	id, key := it.ref, string(it.ref)
	var sid *string
	if id == nil { // a watched event: named by the execution's msg_id
		sid = &it.sid
		key = "w/" + it.ev.ExecID
		if it.ev.ExecID == "" {
			id = json.RawMessage("null")
		} else {
			id, _ = json.Marshal(it.ev.ExecID)
		}
	}
	var v any
	switch {
	case it.ev.Result != nil:
		r := it.ev.Result
		delete(cs.seq, key)
		v = wsResult{"result", id, sid, r.Success(), r.Message(), V2Data(r)}
	case it.ev.State != "":
		v = wsStatus{"status", id, sid, it.ev.State}
	case it.ev.Out != nil:
		out, err := it.ev.Out.CompactJSON()
		if err != nil {
			return 0, nil, false
		}
		cs.seq[key]++
		v = wsOutput{"output", id, sid, cs.seq[key], json.RawMessage(out)}
	default:
		return 0, nil, false
	}
	b, err := json.MarshalNoEscape(v)
	if err != nil {
		return 0, nil, false
	}
	return websocket.MessageText, b, true
}
