// Package terminals serves the Jupyter terminals API (GET/POST
// /api/terminals, GET/DELETE /api/terminals/{name}) and each terminal's
// terminado WebSocket at /terminals/websocket/{name}: a shell on a real
// pseudo-terminal, started by stream/backend under the same user, limits
// and tenant sandbox as every runtime. A terminal outlives its sockets: a
// client that reconnects gets the recent screen replayed; one nobody is
// attached to is closed after the idle limit. The page's terminal panel
// and @jupyterlab/services' TerminalManager both speak to it.
package terminals

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/fasthttp/router"
	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/gateway/wsock"
	"github.com/aiod/aiod/stream/backend"
)

// SocketRoute is the terminado WebSocket's route pattern.
const SocketRoute = "/terminals/websocket/{name}"

// Config bounds the terminals.
type Config struct {
	Max  int           // terminals per tenant; 0 is 16
	Idle time.Duration // a terminal no socket is attached to is closed after it; 0 is 30 min
}

// Surface is the terminals API.
type Surface struct {
	core *call.Core
	hub  *wsock.Hub
	cfg  Config

	mu     sync.Mutex
	terms  map[key]*terminal
	serial int
	closed bool
	reaper sync.Once
}

type key struct{ tenant, name string }

type terminal struct {
	name, tenant string
	t            *backend.Terminal
	idle         time.Duration // closed after this long without a socket; 0: Config.Idle
}

// Model is a terminal as the Jupyter API shows it.
type Model struct {
	Name         string `json:"name"`
	LastActivity string `json:"last_activity"`
}

func (tm *terminal) model() Model {
	return Model{Name: tm.name, LastActivity: tm.t.LastActivity().UTC().Format("2006-01-02T15:04:05.000000Z")}
}

// New makes the surface; its sockets are hub's.
func New(core *call.Core, hub *wsock.Hub, cfg Config) *Surface {
	if cfg.Max <= 0 {
		cfg.Max = 16
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 30 * time.Minute
	}
	return &Surface{core: core, hub: hub, cfg: cfg, terms: map[key]*terminal{}}
}

// Register adds the routes.
func (s *Surface) Register(r *router.Router) {
	r.GET("/api/terminals", s.list)
	r.POST("/api/terminals", s.create)
	r.GET("/api/terminals/{name}", s.get)
	r.DELETE("/api/terminals/{name}", s.remove)
	r.GET(SocketRoute, s.socket)
	r.GET(ShellSocketRoute, s.shellSocket) // shellws.go
}

// startReaper starts, once, the goroutine that closes ended and idle
// terminals, and every terminal when the core closes.
func (s *Surface) startReaper() {
	s.reaper.Do(func() {
		s.core.Go(func() {
			tick := time.NewTicker(min(s.cfg.Idle/4, shellIdle/4, 30*time.Second))
			defer tick.Stop()
			for {
				select {
				case <-s.core.Ctx().Done():
					s.closeAll()
					return
				case <-tick.C:
					s.reap(time.Now())
				}
			}
		})
	})
}

// reap closes terminals whose shell ended, and idle ones nobody watches.
func (s *Surface) reap(now time.Time) {
	var gone []*terminal
	s.mu.Lock()
	for k, tm := range s.terms {
		if tm.t == nil {
			continue // still starting: its create owns it
		}
		ended := false
		select {
		case <-tm.t.Done():
			ended = true
		default:
		}
		idle := s.cfg.Idle
		if tm.idle > 0 {
			idle = tm.idle
		}
		if ended || tm.t.Attached() == 0 && now.Sub(tm.t.LastActivity()) > idle {
			delete(s.terms, k)
			gone = append(gone, tm)
		}
	}
	s.mu.Unlock()
	for _, tm := range gone {
		s.closeTerm(tm)
	}
}

func (s *Surface) closeAll() {
	s.mu.Lock()
	s.closed = true
	all := make([]*terminal, 0, len(s.terms))
	for k, tm := range s.terms {
		if tm.t == nil {
			continue // still starting: its create sees closed and closes it
		}
		all = append(all, tm)
		delete(s.terms, k)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, tm := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.closeTerm(tm)
		}()
	}
	wg.Wait()
}

func (s *Surface) closeTerm(tm *terminal) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tm.t.Close(ctx); err != nil {
		s.core.Log.Warn("close terminal", "name", tm.name, "err", err)
	}
}

// jfail answers a Jupyter API error.
func jfail(ctx *fasthttp.RequestCtx, status int, msg string) {
	jwrite(ctx, status, map[string]any{"message": msg, "reason": fasthttp.StatusMessage(status)})
}

func jwrite(ctx *fasthttp.RequestCtx, status int, v any) {
	b, _ := api.Marshal(v)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.Response.SetBodyRaw(b)
}

// GET /api/terminals
func (s *Surface) list(ctx *fasthttp.RequestCtx) {
	tenant := call.Tenant(ctx)
	s.reap(time.Now())
	s.mu.Lock()
	out := []Model{}
	for k, tm := range s.terms {
		if k.tenant == tenant && tm.t != nil {
			out = append(out, tm.model())
		}
	}
	s.mu.Unlock()
	jwrite(ctx, fasthttp.StatusOK, out)
}

// POST /api/terminals {"name"?, "cwd"?}
func (s *Surface) create(ctx *fasthttp.RequestCtx) {
	f, fe := api.Decode(ctx.PostBody())
	var name, cwd string
	if fe == nil {
		if p := f.OptStr("name"); p != nil {
			name = *p
		}
		if p := f.OptStr("cwd"); p != nil {
			cwd = *p
		}
		fe = f.Err()
	}
	if fe == nil && name != "" {
		fe = call.ValidSessionID("name", name)
	}
	if fe == nil && cwd != "" {
		cwd, fe = s.folder(ctx, cwd)
	}
	if fe != nil {
		jfail(ctx, fasthttp.StatusUnprocessableEntity, fe.Error())
		return
	}
	tm, status, msg := s.open(call.Tenant(ctx), name, cwd, 0)
	if tm == nil {
		jfail(ctx, status, msg)
		return
	}
	jwrite(ctx, fasthttp.StatusOK, tm.model()) // Jupyter answers an existing one too
}

// open returns tenant's terminal name, started now in cwd (idle: its idle
// limit, 0 the configured one), or the running one of that name; "" names
// a new one. On failure it returns the status and message to answer.
func (s *Surface) open(tenant, name, cwd string, idle time.Duration) (*terminal, int, string) {
	s.reap(time.Now())
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fasthttp.StatusServiceUnavailable, "aiod is shutting down"
	}
	n := 0
	for k := range s.terms {
		if k.tenant == tenant {
			n++
		}
	}
	if name != "" {
		if tm := s.terms[key{tenant, name}]; tm != nil {
			s.mu.Unlock()
			if tm.t == nil {
				return nil, fasthttp.StatusConflict, "terminal " + strconv.Quote(name) + " is starting: ask again in a moment"
			}
			return tm, 0, ""
		}
	}
	if n >= s.cfg.Max {
		s.mu.Unlock()
		return nil, fasthttp.StatusTooManyRequests, "at most " + strconv.Itoa(s.cfg.Max) + " terminals at once: close one (DELETE /api/terminals/{name})"
	}
	if name == "" {
		for {
			s.serial++
			name = strconv.Itoa(s.serial)
			if s.terms[key{tenant, name}] == nil {
				break
			}
		}
	}
	placeholder := &terminal{name: name, tenant: tenant, idle: idle}
	s.terms[key{tenant, name}] = placeholder // reserves the name while the shell starts
	s.mu.Unlock()
	t, err := s.core.RT.StartTerminal(backend.TerminalWant{Tenant: tenant, Cwd: cwd})
	s.mu.Lock()
	if err != nil || s.closed {
		delete(s.terms, key{tenant, name})
		s.mu.Unlock()
		if err == nil {
			s.closeTerm(&terminal{name: name, t: t})
			return nil, fasthttp.StatusServiceUnavailable, "aiod is shutting down"
		}
		return nil, fasthttp.StatusServiceUnavailable, "start terminal: " + err.Error()
	}
	placeholder.t = t
	s.mu.Unlock()
	s.startReaper()
	return placeholder, 0, ""
}

// folder checks that dir exists in the caller's view.
func (s *Surface) folder(ctx *fasthttp.RequestCtx, dir string) (string, *api.FieldError) {
	if !strings.HasPrefix(dir, "/") {
		dir = strings.TrimSuffix(s.core.Workspace(), "/") + "/" + dir
	}
	view, err := s.core.ViewOf(ctx)
	if err == nil {
		var st interface{ IsDir() bool }
		if st, err = view.Stat(dir); err == nil && !st.IsDir() {
			return "", &api.FieldError{In: "body", Field: "cwd", Type: "value_error", Msg: dir + " is not a directory"}
		}
	}
	if err != nil {
		return "", &api.FieldError{In: "body", Field: "cwd", Type: "value_error", Msg: "cannot start a terminal in " + dir + ": " + err.Error()}
	}
	return dir, nil
}

// lookup returns the caller's terminal named in the path, or answers 404.
func (s *Surface) lookup(ctx *fasthttp.RequestCtx) *terminal {
	name, fe := api.PathParam(ctx, "name")
	if fe != nil {
		jfail(ctx, fasthttp.StatusBadRequest, fe.Error())
		return nil
	}
	s.mu.Lock()
	tm := s.terms[key{call.Tenant(ctx), name}]
	if tm != nil && tm.t == nil {
		tm = nil // still starting
	}
	s.mu.Unlock()
	if tm == nil {
		jfail(ctx, fasthttp.StatusNotFound, "no terminal "+strconv.Quote(name))
		return nil
	}
	return tm
}

// GET /api/terminals/{name}
func (s *Surface) get(ctx *fasthttp.RequestCtx) {
	if tm := s.lookup(ctx); tm != nil {
		jwrite(ctx, fasthttp.StatusOK, tm.model())
	}
}

// DELETE /api/terminals/{name}
func (s *Surface) remove(ctx *fasthttp.RequestCtx) {
	tm := s.lookup(ctx)
	if tm == nil {
		return
	}
	s.mu.Lock()
	if s.terms[key{tm.tenant, tm.name}] == tm {
		delete(s.terms, key{tm.tenant, tm.name})
	}
	s.mu.Unlock()
	s.closeTerm(tm)
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

// GET /terminals/websocket/{name}: terminado's protocol. The client sends
// ["stdin", text] and ["set_size", rows, cols, ...]; aiod sends ["setup",
// {}] first, the recent screen and every later output as ["stdout",
// text], and ["disconnect", 1] when the shell ends.
func (s *Surface) socket(ctx *fasthttp.RequestCtx) {
	tm := s.lookup(ctx)
	if tm == nil {
		return
	}
	s.hub.Upgrade(ctx, SocketRoute, nil, func(wc *wsock.Conn) {
		detach := attach(wc, tm, func(text string) []byte { return frame("stdout", text) }, []byte(`["setup",{}]`))
		defer detach()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // the shell's end ends the socket
			defer wg.Done()
			select {
			case <-tm.t.Done():
				// The client closes on disconnect (terminado's clients do);
				// one that does not is closed a little later, once the
				// message has had time to leave the queue.
				wc.Push(wsock.Item{Raw: []byte(`["disconnect",1]`)})
				select {
				case <-time.After(2 * time.Second):
					wc.CloseWith(wsock.CloseNormal, "the shell ended", "terminal_ended")
				case <-stop:
				}
			case <-stop:
			}
		}()
		defer wg.Wait()
		defer close(stop)
		serve(wc, func(b []byte) { terminadoInput(wc, tm, b) })
	})
}

// terminadoInput takes one client message of terminado's protocol.
func terminadoInput(wc *wsock.Conn, tm *terminal, b []byte) {
	var msg []json.RawMessage
	if json.Unmarshal(b, &msg) != nil || len(msg) == 0 {
		wc.Drop("bad_client_message", 1)
		return
	}
	var typ string
	_ = json.Unmarshal(msg[0], &typ)
	switch typ {
	case "stdin":
		var text string
		if len(msg) < 2 || json.Unmarshal(msg[1], &text) != nil {
			wc.Drop("bad_client_message", 1)
			return
		}
		if err := tm.t.Write([]byte(text)); err != nil {
			wc.Drop("terminal_write_failed", 1)
		}
	case "set_size":
		var rows, cols int
		if len(msg) < 3 || json.Unmarshal(msg[1], &rows) != nil || json.Unmarshal(msg[2], &cols) != nil ||
			rows <= 0 || cols <= 0 || rows > 1000 || cols > 1000 {
			wc.Drop("bad_client_message", 1)
			return
		}
		_ = tm.t.Resize(uint16(rows), uint16(cols))
	default:
		wc.Drop("bad_client_message", 1)
	}
}

// serve writes wc's items as text messages and hands each client message
// to take, until the socket ends.
func serve(wc *wsock.Conn, take func(b []byte)) {
	wc.Run(func(it *wsock.Item) (websocket.MessageType, []byte, bool) {
		return websocket.MessageText, it.Raw, true
	}, func(context.Context) error {
		for {
			_, b, err := wc.Read()
			if err != nil {
				return err
			}
			take(b)
		}
	})
}

// attach pushes hello to wc, then tm's recent screen and every later
// output, each framed by out; detach ends the live part.
func attach(wc *wsock.Conn, tm *terminal, out func(text string) []byte, hello ...[]byte) (detach func()) {
	var dec utf8Carry
	var mu sync.Mutex // orders the replay before live output
	mu.Lock()
	defer mu.Unlock()
	replay, detach := tm.t.Attach(func(b []byte) {
		mu.Lock()
		defer mu.Unlock()
		if text := dec.decode(b); text != "" {
			wc.Push(wsock.Item{Raw: out(text)})
		}
	})
	for _, h := range hello {
		wc.Push(wsock.Item{Raw: h})
	}
	if text := dec.decode(replay); text != "" {
		wc.Push(wsock.Item{Raw: out(text)})
	}
	return detach
}

func frame(typ, text string) []byte {
	b, _ := api.Marshal([]string{typ, text})
	return b
}

// utf8Carry holds back a character cut between two reads.
type utf8Carry struct{ rest []byte }

func (c *utf8Carry) decode(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	p := append(c.rest, b...)
	cut := 0
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax+1; i-- {
		if p[i] < 0x80 {
			break
		}
		if p[i] >= 0xC0 {
			if !utf8.FullRune(p[i:]) {
				cut = len(p) - i
			}
			break
		}
	}
	c.rest = append([]byte(nil), p[len(p)-cut:]...)
	return strings.ToValidUTF8(string(p[:len(p)-cut]), "\uFFFD")
}
