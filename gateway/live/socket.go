// Package live serves GET /v2/code/ws: aiod's own streaming protocol over
// a WebSocket. Executions run on the call core (they outlive the socket);
// the socket follows them, watches sessions, and asks for completions.
package live

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/fasthttp/router"
	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/gateway/fsplane/watch"
	"github.com/aiod/aiod/gateway/wsock"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/execution"
)

// GET /v2/code/ws: aiod's own streaming protocol, JSON text messages.
//
//	client {"type":"execute","id":REF,"language":…,"code":…,"session_id":…,"timeout":…,"execution_id":…}
//	server {"type":"accepted","id":REF,"execution_id":…}                   at once
//	       {"type":"output","id":REF,"execution_id":…,"seq":N,"output":{compact output}}   one per output, as sent
//	       {"type":"result","id":REF,"execution_id":…,"success":…,"message":…,"data":{POST /v2/code/execute's data, ANSI kept}}
//	client {"type":"resume","id":REF,"execution_id":…,"after":SEQ}       replay what came after output SEQ, then live
//	server {"type":"accepted","id":REF,"execution_id":…,"state":…}, then output and result as above
//	client {"type":"complete"|"inspect","id":REF,"language":…,"session_id":…,"code":…,"cursor_pos":…}
//	server {"type":"complete_reply","id":REF,"matches":…,"cursor_start":…,"cursor_end":…,"metadata":…}
//	       {"type":"inspect_reply","id":REF,"found":…,"data":{mime bundle},"metadata":…}
//	client {"type":"interrupt","id":REF,"session_id":…,"language":…}
//	client {"type":"watch","id":REF,"session_id":…} / {"type":"unwatch",…}
//	server {"type":"ok","id":REF,"request":"interrupt"|"watch"|"unwatch"}
//	       watched: output, status ({"state":"busy"|"idle"|…}) and result messages
//	       with "id" = the execution's msg_id and "session_id"
//	       {"type":"error","id":REF,"status":422|404|409|503,"message":…}
//	client {"type":"watch_files",…} / {"type":"unwatch_files","id":REF}: file watches (files.go)

// Route is the socket's path.
const Route = "/v2/code/ws"

// Surface is the /v2/code/ws route.
type Surface struct {
	core    *call.Core
	hub     *wsock.Hub
	watches *watch.Watchers // the daemon's file watchers (files.go)
}

// New makes the surface; its sockets are hub's, its executions core's,
// its file watches in watches.
func New(core *call.Core, hub *wsock.Hub, watches *watch.Watchers) *Surface {
	return &Surface{core: core, hub: hub, watches: watches}
}

// Register adds the route.
func (s *Surface) Register(r *router.Router) { r.GET(Route, s.serve) }

// serve upgrades GET /v2/code/ws.
func (s *Surface) serve(ctx *fasthttp.RequestCtx) {
	owner, tenant := call.Owner(ctx), call.Tenant(ctx)
	s.hub.Upgrade(ctx, Route, nil, func(wc *wsock.Conn) {
		cs := &codeSocket{core: s.core, wc: wc, watches: s.watches, sessWatches: map[*stream.Session]*watchSub{}, follows: map[*wsFollow]struct{}{},
			owner: owner, tenant: tenant, files: fileWatches{by: map[string]*fileWatch{}}}
		wc.Run(cs.render, cs.read)
		cs.stopFollowing()
		cs.stopFileWatches()
		for sess, w := range cs.sessWatches {
			sess.Mux().Unwatch(w)
		}
	})
}

// codeSocket is the protocol state of one /v2/code/ws socket.
type codeSocket struct {
	core        *call.Core
	wc          *wsock.Conn
	owner       string                        // the caller key sessions it creates count against
	tenant      string                        // whose sessions and executions it can name (call.Tenant)
	sessWatches map[*stream.Session]*watchSub // reader goroutine only
	watches     *watch.Watchers               // the daemon's file watchers
	files       fileWatches                   // this socket's watch_files (files.go)
	seq         map[string]int                // writer goroutine only: outputs sent per watched execution without a seq

	fmu     sync.Mutex
	follows map[*wsFollow]struct{} // executions followed (own and resumed), until their result
}

// read is the socket's reader: it handles one client message at a time and
// never waits for an execution.
func (cs *codeSocket) read(context.Context) error {
	for {
		typ, b, err := cs.wc.Read()
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
	case "resume":
		cs.resume(ref, b)
	case "complete", "inspect":
		cs.ask(ref, b, head.Type == "inspect")
	case "interrupt":
		cs.interrupt(ref, head)
	case "watch":
		cs.watch(ref, head)
	case "unwatch":
		cs.unwatch(ref, head)
	case "watch_files":
		cs.watchFiles(ref, b)
	case "unwatch_files":
		cs.unwatchFiles(ref)
	case "":
		cs.fail(ref, fasthttp.StatusUnprocessableEntity, "field 'type': is required (execute, resume, complete, inspect, interrupt, watch, unwatch, watch_files or unwatch_files)")
	default:
		cs.fail(ref, fasthttp.StatusUnprocessableEntity, fmt.Sprintf("field 'type': unknown message type %q (use execute, resume, complete, inspect, interrupt, watch, unwatch, watch_files or unwatch_files)", head.Type))
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
	if ref == nil {
		cs.fail(nil, fasthttp.StatusUnprocessableEntity, "field 'id': is required, so that outputs and the result can name their execution")
		return
	}
	c, fe := cs.core.ParseExecute(b, "type", "id")
	if fe != nil {
		cs.fail(ref, fasthttp.StatusUnprocessableEntity, fe.Error())
		return
	}
	if max := cs.wc.Limits().MaxInFlight; int(cs.wc.Inflight.Load()) >= max {
		cs.fail(ref, fasthttp.StatusServiceUnavailable, fmt.Sprintf("this socket already has %d executions in flight (the limit); wait for a result", max))
		return
	}
	ref = append(json.RawMessage(nil), ref...)
	c.Origin, c.Owner, c.Tenant = cs, cs.owner, cs.tenant
	rec, created, ce := cs.core.Claim(c)
	if ce != nil {
		cs.failCall(ref, ce)
		return
	}
	if created {
		// A refusal by the session caps is the only answer: no accepted
		// before it.
		if ce := cs.core.Admit(&c); ce != nil {
			rec.Fail(ce)
			cs.failCall(ref, ce)
			return
		}
	}
	cs.accepted(ref, rec, "")
	if !created { // an execution that exists: follow it from the start
		cs.follow(ref, rec, 0)
		return
	}
	cs.follow(ref, rec, 0)
	// The execution does not depend on the socket: closing the socket does
	// not stop it. Its outputs and result reach the socket through the
	// follower; a failure to run, too (as an error entry).
	cs.wc.Inflight.Add(1)
	cs.core.Start(c, rec, func() { cs.wc.Inflight.Add(-1) })
}

// resume replays an execution from after output seq `after`, then follows
// it live under the client's new reference.
func (cs *codeSocket) resume(ref json.RawMessage, b []byte) {
	if ref == nil {
		cs.fail(nil, fasthttp.StatusUnprocessableEntity, "field 'id': is required, so that outputs and the result can name their execution")
		return
	}
	var m struct {
		ExecutionID *string `json:"execution_id"`
		After       *int    `json:"after"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.ExecutionID == nil || *m.ExecutionID == "" {
		cs.fail(ref, fasthttp.StatusUnprocessableEntity, "field 'execution_id': is required (a string), with an optional 'after' (the last output seq seen)")
		return
	}
	after := 0
	if m.After != nil {
		if *m.After < 0 {
			cs.fail(ref, fasthttp.StatusUnprocessableEntity, "field 'after': must be an output seq, 0 or more")
			return
		}
		after = *m.After
	}
	rec, err := cs.core.Reg.Executions().Get(cs.tenant, *m.ExecutionID)
	var gone *execution.GoneError
	switch {
	case errors.As(err, &gone):
		cs.fail(ref, fasthttp.StatusGone, gone.Error())
		return
	case err != nil:
		cs.fail(ref, fasthttp.StatusNotFound, fmt.Sprintf("execution %q not found", *m.ExecutionID))
		return
	}
	ref = append(json.RawMessage(nil), ref...)
	cs.accepted(ref, rec, rec.View().State)
	cs.follow(ref, rec, after)
}

// accepted tells the client the execution id of its reference.
func (cs *codeSocket) accepted(ref json.RawMessage, rec *execution.Record, state string) {
	b, _ := api.Marshal(struct {
		Type        string          `json:"type"`
		ID          json.RawMessage `json:"id"`
		ExecutionID string          `json:"execution_id"`
		State       string          `json:"state,omitempty"`
	}{"accepted", ref, rec.ID, state})
	cs.wc.Push(wsock.Item{Raw: b})
}

// follow hands rec's outputs after `after`, and its result, to the client
// under ref; the socket stops following when it closes.
func (cs *codeSocket) follow(ref json.RawMessage, rec *execution.Record, after int) {
	f := &wsFollow{}
	detach, err := rec.Follow(after, func(e execution.Entry) {
		switch {
		case e.Err != nil:
			cs.failCall(ref, call.ErrorOf(e.Err))
		case e.Event.Result != nil || e.Event.Out != nil:
			cs.wc.Push(wsock.Item{Ev: e.Event, Ref: ref, Seq: e.Seq, ExecID: rec.ID})
		default:
			return
		}
		if e.Err != nil || e.Event.Result != nil {
			cs.unfollow(f)
		}
	})
	var gone *execution.GoneError
	switch {
	case errors.As(err, &gone):
		cs.fail(ref, fasthttp.StatusGone, gone.Error())
		return
	case err != nil:
		cs.fail(ref, fasthttp.StatusServiceUnavailable, err.Error())
		return
	}
	cs.fmu.Lock()
	f.detach = detach
	if !f.ended {
		cs.follows[f] = struct{}{}
	}
	cs.fmu.Unlock()
}

// unfollow forgets a follower that got its execution's end.
func (cs *codeSocket) unfollow(f *wsFollow) {
	cs.fmu.Lock()
	f.ended = true
	delete(cs.follows, f)
	cs.fmu.Unlock()
}

// stopFollowing detaches every follower, when the socket closes.
func (cs *codeSocket) stopFollowing() {
	cs.fmu.Lock()
	fs := cs.follows
	cs.follows = map[*wsFollow]struct{}{}
	cs.fmu.Unlock()
	for f := range fs {
		if f.detach != nil {
			f.detach()
		}
	}
}

// wsFollow is one execution the socket follows.
type wsFollow struct {
	detach func()
	ended  bool // its result came (guarded by codeSocket.fmu)
}

func (cs *codeSocket) target(ref json.RawMessage, head codeHead) ([]*stream.Session, bool) {
	if head.SessionID == nil || *head.SessionID == "" {
		cs.fail(ref, fasthttp.StatusUnprocessableEntity, "field 'session_id': is required")
		return nil, false
	}
	lang := ""
	if head.Language != nil {
		if lang = *head.Language; !call.KnownLanguage(lang) {
			cs.fail(ref, fasthttp.StatusUnprocessableEntity, fmt.Sprintf("field 'language': unsupported language %q: use python, javascript or bash", lang))
			return nil, false
		}
	}
	ss := cs.core.Sessions(cs.tenant, lang, *head.SessionID)
	if len(ss) == 0 {
		cs.fail(ref, fasthttp.StatusNotFound, fmt.Sprintf("session %q not found", *head.SessionID))
		return nil, false
	}
	return ss, true
}

// interrupt interrupts the sessions named, on a goroutine of its own: an
// interrupt may wait for its runtime (up to 5 s), and the reader must go on
// reading meanwhile (pings, other calls). It ends early at shutdown.
func (cs *codeSocket) interrupt(ref json.RawMessage, head codeHead) {
	ss, ok := cs.target(ref, head)
	if !ok {
		return
	}
	ref = append(json.RawMessage(nil), ref...)
	ok = cs.core.Go(func() {
		ctx, cancel := context.WithTimeout(cs.core.Ctx(), 5*time.Second)
		defer cancel()
		for _, s := range ss {
			if err := s.Interrupt(ctx, "a client (WebSocket interrupt)"); err != nil {
				cs.fail(ref, fasthttp.StatusServiceUnavailable, err.Error())
				return
			}
		}
		cs.ok(ref, "interrupt")
	})
	if !ok {
		cs.fail(ref, fasthttp.StatusServiceUnavailable, stream.ErrShuttingDown.Error())
	}
}

func (cs *codeSocket) watch(ref json.RawMessage, head codeHead) {
	ss, ok := cs.target(ref, head)
	if !ok {
		return
	}
	for _, s := range ss {
		if cs.sessWatches[s] == nil {
			w := &watchSub{cs: cs, sid: s.ID}
			cs.sessWatches[s] = w
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
	for s, w := range cs.sessWatches {
		if s.ID == *head.SessionID && (head.Language == nil || s.Language == *head.Language) {
			s.Mux().Unwatch(w)
			delete(cs.sessWatches, s)
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
	Type       string          `json:"type"`
	ID         json.RawMessage `json:"id"`
	Status     int             `json:"status"`
	Message    string          `json:"message"`
	ErrorKind  string          `json:"error_kind,omitempty"`
	RetryAfter int             `json:"retry_after,omitempty"`
}

func (cs *codeSocket) fail(ref json.RawMessage, status int, msg string) {
	cs.failCall(ref, &call.Error{Status: status, Msg: msg})
}

// failCall sends ce as an error message; a refusal by a limit carries its
// error_kind and retry_after (seconds).
func (cs *codeSocket) failCall(ref json.RawMessage, ce *call.Error) {
	if ref == nil {
		ref = json.RawMessage("null")
	}
	b, _ := api.Marshal(wsError{"error", ref, ce.Status, ce.Msg, ce.Kind, ce.Retry})
	cs.wc.Push(wsock.Item{Raw: b})
}

func (cs *codeSocket) ok(ref json.RawMessage, request string) {
	if ref == nil {
		ref = json.RawMessage("null")
	}
	b, _ := api.Marshal(struct {
		Type    string          `json:"type"`
		ID      json.RawMessage `json:"id"`
		Request string          `json:"request"`
	}{"ok", ref, request})
	cs.wc.Push(wsock.Item{Raw: b})
}

// watchSub receives every event of a watched session. The socket's own
// executions are left out: they already arrive under the client's id.
type watchSub struct {
	cs  *codeSocket
	sid string
}

func (w *watchSub) Deliver(ev execution.Event) {
	if ev.Origin == w.cs {
		return
	}
	if ev.Result != nil || ev.State != "" || ev.Out != nil {
		w.cs.wc.Push(wsock.Item{Ev: ev, SID: w.sid})
	}
}

// Rendered messages.
type wsOutput struct {
	Type        string          `json:"type"`
	ID          json.RawMessage `json:"id"`
	SessionID   *string         `json:"session_id,omitempty"`
	ExecutionID string          `json:"execution_id,omitempty"`
	Seq         int             `json:"seq"`
	Output      any             `json:"output"`
}

type wsResult struct {
	Type        string          `json:"type"`
	ID          json.RawMessage `json:"id"`
	SessionID   *string         `json:"session_id,omitempty"`
	ExecutionID string          `json:"execution_id,omitempty"`
	Success     bool            `json:"success"`
	Message     string          `json:"message"`
	Data        any             `json:"data"`
}

type wsStatus struct {
	Type        string          `json:"type"`
	ID          json.RawMessage `json:"id"`
	SessionID   *string         `json:"session_id,omitempty"`
	ExecutionID string          `json:"execution_id,omitempty"`
	State       string          `json:"state"`
}

// render turns a queued item into a text message (writer goroutine).
func (cs *codeSocket) render(it *wsock.Item) (websocket.MessageType, []byte, bool) {
	if it.Raw != nil {
		return websocket.MessageText, it.Raw, true
	}
	if cs.seq == nil {
		cs.seq = map[string]int{}
	}
	id, key := it.Ref, string(it.Ref)
	var sid *string
	if id == nil { // a watched event: named by the execution's msg_id
		sid = &it.SID
		key = "w/" + it.Ev.ExecID
		if it.Ev.ExecID == "" {
			id = json.RawMessage("null")
		} else {
			id, _ = api.Marshal(it.Ev.ExecID)
		}
	}
	execID, seq := it.ExecID, it.Seq
	if execID == "" {
		execID, seq = it.Ev.ExecutionID, it.Ev.Seq
	}
	var v any
	switch {
	case it.Ev.Result != nil:
		r := it.Ev.Result
		delete(cs.seq, key)
		v = wsResult{"result", id, sid, execID, r.Success(), r.Message(), call.DataOf(r)} // ANSI kept, as in the outputs
	case it.Ev.State != "":
		if it.Ev.State == "idle" && it.Ref == nil {
			delete(cs.seq, key) // a watched execution has ended: its count goes
		}
		v = wsStatus{"status", id, sid, execID, it.Ev.State}
	case it.Ev.Out != nil:
		out, err := it.Ev.Out.CompactJSON()
		if err != nil {
			return 0, nil, false
		}
		if seq == 0 { // an execution aiod did not start (a Jupyter front end's): counted here
			cs.seq[key]++
			seq = cs.seq[key]
		}
		v = wsOutput{"output", id, sid, execID, seq, json.RawMessage(out)}
	default:
		return 0, nil, false
	}
	b, err := api.Marshal(v)
	if err != nil {
		return 0, nil, false
	}
	return websocket.MessageText, b, true
}

// ask answers a complete or inspect message, off the reader goroutine.
func (cs *codeSocket) ask(ref json.RawMessage, b []byte, inspect bool) {
	a, fe := call.ParseAsk(b, inspect, "type", "id")
	a.Owner, a.Tenant = cs.owner, cs.tenant
	if fe != nil {
		cs.fail(ref, fasthttp.StatusUnprocessableEntity, fe.Error())
		return
	}
	ref = append(json.RawMessage(nil), ref...)
	typ := "complete_reply"
	if inspect {
		typ = "inspect_reply"
	}
	ok := cs.core.Go(func() {
		fields, ce := cs.core.Ask(a)
		if ce != nil {
			cs.failCall(ref, ce)
			return
		}
		out := map[string]any{"type": typ, "id": ref}
		for k, x := range fields {
			out[k] = x
		}
		msg, err := api.Marshal(out)
		if err != nil {
			cs.fail(ref, fasthttp.StatusInternalServerError, "encode the answer: "+err.Error())
			return
		}
		cs.wc.Push(wsock.Item{Raw: msg})
	})
	if !ok {
		cs.fail(ref, fasthttp.StatusServiceUnavailable, stream.ErrShuttingDown.Error())
	}
}
