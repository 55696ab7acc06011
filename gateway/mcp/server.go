// Package mcp serves the Model Context Protocol at /mcp (streamable HTTP,
// with the official Go SDK): tools that run code and reach files on the
// call core, for the caller the guard found.
package mcp

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fasthttp/router"
	"github.com/goccy/go-json"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/gateway/fsplane"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/execution"
)

// ProgressDrops counts, by reason (queue_full, not_sent), outputs left out
// of an execute_code call's progress notifications (the daemon's
// stream.Counters keeps it; Families describes it).
const ProgressDrops = "mcp_progress_drops"

// Families describes the counters the MCP server keeps.
var Families = map[string]stream.Family{
	ProgressDrops: {Help: "Outputs left out of an MCP call's progress notifications (its result still has them), by reason.", Labels: []string{"reason"}},
}

// Path is the Model Context Protocol endpoint (streamable HTTP); AliasPath
// is the agent_sandbox reference's name for it, the same endpoint.
const (
	Path      = "/mcp"
	AliasPath = "/v1/mcp"
)

// sessionIdle is how long an MCP session lives without a request; a
// client that comes back later initializes again.
const sessionIdle = 30 * time.Minute

// Server serves MCP at /mcp with the official Go SDK (its tools run on
// the call core, as the REST routes do). The SDK's
// streamable HTTP handler is a net/http handler; fasthttpadaptor bridges it
// to fasthttp on the same port and streams: when the handler flushes, the
// adaptor sends the headers and feeds the rest of the body through a pipe
// into fasthttp's chunked writer, so each server-sent event (progress
// notifications, then the result) leaves as it is written.
//
// The handler never sees the *fasthttp.RequestCtx as its context (fasthttp
// reuses it, and the SDK keeps request contexts, detached, for a session's
// life): POST and DELETE run under the core's context, which ends at
// shutdown, and the long-lived GET streams under one that ends when
// shutdown begins, so that they do not hold up the drain.
type Server struct {
	core    *call.Core
	srv     *sdk.Server
	handler http.Handler
	files   *fsplane.Files // on HostFS; files.For(view) acts in a caller's view

	streams     context.Context // parent of GET streams; ends when shutdown begins
	stopStreams context.CancelFunc

	owners owners // MCP session id -> the tenant that made it
}

// owners remembers which tenant made each MCP session, for as long as
// the SDK keeps such a session (sessionIdle after its last request).
type owners struct {
	mu sync.Mutex
	m  map[string]*owner
}

type owner struct {
	tenant string
	seen   time.Time
}

// check reports whether tenant may use session id (unknown ids pass: the
// SDK answers them) and notes its use.
func (o *owners) check(id, tenant string, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := o.m[id]
	if w == nil {
		return true
	}
	if w.tenant != tenant {
		return false
	}
	w.seen = now
	return true
}

// add records a new session's maker, dropping sessions the SDK has let go.
func (o *owners) add(id, tenant string, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]*owner{}
	}
	if _, ok := o.m[id]; ok {
		return
	}
	if len(o.m)%256 == 255 {
		for k, w := range o.m {
			if now.Sub(w.seen) > sessionIdle {
				delete(o.m, k)
			}
		}
	}
	o.m[id] = &owner{tenant: tenant, seen: now}
}

func (o *owners) forget(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, id)
}

// Config is what the MCP server needs besides the core.
type Config struct {
	MaxBody int    // largest request body; --max-body
	Version string // aiod's, as the server reports it
}

// New makes the MCP server.
func New(core *call.Core, cfg Config) *Server {
	log := core.Log
	m := &Server{core: core, files: fsplane.NewFiles(fsplane.Config{MaxBody: int64(cfg.MaxBody), Logger: log, Workspace: core.Workspace()})}
	m.streams, m.stopStreams = context.WithCancel(core.Ctx())
	m.srv = sdk.NewServer(&sdk.Implementation{Name: "aiod", Title: "aiod code execution", Version: cfg.Version}, &sdk.ServerOptions{
		Instructions: "aiod runs Python (Jupyter kernels) and JavaScript (Node.js) on this host. " +
			"execute_code without session_id runs in a fresh runtime; with one, state persists across calls. " +
			"The file tools see the same file system as the code.",
		Logger: log,
	})
	m.addTools()
	m.handler = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return m.srv }, &sdk.StreamableHTTPOptions{
		SessionTimeout: sessionIdle,
		// The guard has checked Host (with --allowed-hosts), Origin and
		// credentials before any route; the SDK's own loopback-only Host
		// rule would refuse hosts the operator allowed.
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        int64(cfg.MaxBody),
		Logger:                     log,
	})
	return m
}

// Register adds the MCP endpoint.
func (m *Server) Register(r *router.Router) {
	h := fasthttpadaptor.NewFastHTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		parent := m.core.Ctx()
		if req.Method == http.MethodGet {
			parent = m.streams
		}
		ctx, cancel := context.WithCancel(parent)
		defer cancel()
		uw := &unescapeWriter{w: w}
		defer uw.close()
		m.handler.ServeHTTP(uw, req.WithContext(ctx))
	}))
	// The caller the guard found, and its tenant, ride to the tool calls
	// in headers of aiod's own; ones a client sent are dropped first.
	// An MCP session (its id, its notification stream) is its maker's:
	// another tenant presenting the id is answered as for an unknown one.
	stamped := func(ctx *fasthttp.RequestCtx) {
		tenant := call.Tenant(ctx)
		id := string(ctx.Request.Header.Peek(sessionHeader))
		if id != "" {
			if !m.owners.check(id, tenant, time.Now()) {
				ctx.SetStatusCode(fasthttp.StatusNotFound)
				ctx.SetContentType("text/plain; charset=utf-8")
				ctx.SetBodyString("session not found\n")
				return
			}
		}
		ctx.Request.Header.Del(CallerHeader)
		ctx.Request.Header.Del(TenantHeader)
		if owner := call.Owner(ctx); owner != "" {
			ctx.Request.Header.Set(CallerHeader, owner)
		}
		ctx.Request.Header.Set(TenantHeader, tenant)
		h(ctx)
		switch made := string(ctx.Response.Header.Peek(sessionHeader)); {
		case ctx.IsDelete() && id != "":
			m.owners.forget(id)
		case made != "" && made != id:
			m.owners.add(made, tenant, time.Now())
		}
	}
	for _, p := range []string{Path, AliasPath} {
		r.POST(p, stamped)
		r.GET(p, stamped)
		r.DELETE(p, stamped)
	}
}

// BeginShutdown ends the GET streams, so that fasthttp's drain does not
// wait for them.
func (m *Server) BeginShutdown() { m.stopStreams() }

// Close ends every MCP session; call it after the registry closed, so that
// tool calls in flight have their answers.
func (m *Server) Close() {
	m.stopStreams()
	var all []*sdk.ServerSession
	for ss := range m.srv.Sessions() {
		all = append(all, ss)
	}
	for _, ss := range all {
		_ = ss.Close()
	}
}

// schema is a JSON Schema object with the given properties (each a
// schema) and required names.
func schema(props map[string]any, required ...string) json.RawMessage {
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	b, _ := json.Marshal(s) // plain maps and strings: cannot fail
	return b
}

func (m *Server) addTools() {
	m.srv.AddTool(&sdk.Tool{
		Name:  "execute_code",
		Title: "Run Python, JavaScript or bash",
		Description: "Runs code and returns its outputs as a notebook shows them: stdout/stderr and text/plain as text, " +
			"image/png (e.g. a matplotlib chart) as an image, text/html (e.g. a DataFrame) as HTML text, and errors " +
			"with isError true and the traceback. structuredContent holds the same answer as POST /v2/code/execute " +
			"({success, message, data}). Python runs in a Jupyter kernel (rich outputs, %magics), JavaScript in a " +
			"Node.js REPL (top-level await), bash in a persistent shell (exit code of the last command). Without session_id the code runs in a fresh runtime that ends after the " +
			"call; with session_id the session is created on first use and keeps its variables between calls. " +
			"Ask for progress (a progressToken) to receive each output as it is printed.",
		InputSchema: schema(map[string]any{
			"language":   map[string]any{"type": "string", "enum": []string{"python", "javascript", "bash"}, "description": "python, javascript or bash"},
			"code":       map[string]any{"type": "string", "description": "the code to run"},
			"session_id": map[string]any{"type": "string", "maxLength": 128, "pattern": "^[A-Za-z0-9._:@-]*$", "description": "run in this session (created on first use; variables persist); omit for a one-shot run"},
			"timeout":    map[string]any{"type": "number", "exclusiveMinimum": 0, "maximum": m.core.Cfg.MaxTimeout.Seconds(), "description": fmt.Sprintf("seconds before the code is interrupted; default %g", m.core.Cfg.DefaultTimeout.Seconds())},
			"cwd":        map[string]any{"type": "string", "description": "the working folder of a runtime this call starts (an existing folder; relative to the workspace)"},
			"env":        map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}, "description": "environment variables of a runtime this call starts (bash: of this execution); AIO_* names are refused"},
		}, "language", "code"),
	}, m.executeCode)
	m.srv.AddTool(&sdk.Tool{
		Name:        "list_sessions",
		Title:       "List code sessions",
		Description: "Lists the live code sessions: id, language, backend, whether busy, pid, created and last used times (as GET /v2/code/sessions).",
		InputSchema: schema(map[string]any{}),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
	}, m.listSessions)
	m.srv.AddTool(&sdk.Tool{
		Name:        "delete_session",
		Title:       "End a code session",
		Description: "Ends every runtime under a session id, of any language; its variables are lost. Unknown ids are an error.",
		InputSchema: schema(map[string]any{
			"session_id": map[string]any{"type": "string", "description": "the session to end"},
		}, "session_id"),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)},
	}, m.deleteSession)
	m.srv.AddTool(&sdk.Tool{
		Name:        "read_file",
		Title:       "Read a file",
		Description: "Reads a file of the host (an absolute path, up to 64 MiB). UTF-8 text comes back as text; an image as image content; other binary files as base64 in structuredContent.",
		InputSchema: schema(map[string]any{
			"path": map[string]any{"type": "string", "description": "absolute path of the file"},
		}, "path"),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
	}, m.readFile)
	m.srv.AddTool(&sdk.Tool{
		Name:        "write_file",
		Title:       "Write a file",
		Description: "Writes (or appends to) a file of the host at an absolute path, creating its parent folders.",
		InputSchema: schema(map[string]any{
			"path":     map[string]any{"type": "string", "description": "absolute path of the file"},
			"content":  map[string]any{"type": "string", "description": "the content: text, or base64 with encoding base64"},
			"encoding": map[string]any{"type": "string", "enum": []string{"utf-8", "base64"}, "description": "how content is encoded; utf-8 by default"},
			"append":   map[string]any{"type": "boolean", "description": "append instead of replacing the file"},
		}, "path", "content"),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)},
	}, m.writeFile)
	m.srv.AddTool(&sdk.Tool{
		Name:        "list_files",
		Title:       "List a folder",
		Description: "Lists a folder of the host (an absolute path): name, path, size, is_dir and modified time of each entry, sorted by name.",
		InputSchema: schema(map[string]any{
			"path": map[string]any{"type": "string", "description": "absolute path of the folder"},
		}, "path"),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
	}, m.listFiles)
}

func ptr[T any](v T) *T { return &v }

// toolError is a failed tool call, as the model should see it.
func toolError(msg string) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: msg}}}
}

// structured is v as JSON, for structuredContent (the SDK marshals it with
// encoding/json, without HTML escaping; the v2 data holds goccy values that
// must stay raw JSON), written as every answer is (api.Marshal).
func structured(v any) (json.RawMessage, error) { return api.Marshal(v) }

// args decodes a tool call's arguments with the REST routes' field decoder.
func args(req *sdk.CallToolRequest) (*api.Fields, *sdk.CallToolResult) {
	f, fe := api.Decode(req.Params.Arguments)
	if fe != nil {
		return nil, toolError("invalid arguments: " + fe.Error())
	}
	return f, nil
}

// Headers that carry, from the guard to tool calls, the caller key (for
// --max-sessions-per-key) and the caller's tenant (whose sessions a tool
// call names and lists).
const (
	CallerHeader = "X-Aiod-Caller"
	TenantHeader = "X-Aiod-Tenant"
	// sessionHeader names an MCP session (the streamable transport's).
	sessionHeader = "Mcp-Session-Id"
)

// callerOf is the caller key and the tenant of a tool call, as stamped on
// its HTTP request. A call without the stamp (never from the route) has
// the tenant "", which no caller has: it names nobody's sessions.
func callerOf(req *sdk.CallToolRequest) (owner, tenant string) {
	if req.Extra == nil || req.Extra.Header == nil {
		return "", ""
	}
	// Copies: the adaptor's header values share the request's buffer,
	// which fasthttp reuses once the request is answered, and these names
	// outlive it (in the execution store, the session registry).
	return strings.Clone(req.Extra.Header.Get(CallerHeader)), strings.Clone(req.Extra.Header.Get(TenantHeader))
}

func (m *Server) executeCode(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	c, fe := m.core.ParseExecute(req.Params.Arguments)
	if fe != nil {
		return toolError("invalid arguments: " + fe.Error()), nil
	}
	c.Owner, c.Tenant = callerOf(req)
	var prog *progress
	if token := req.Params.GetProgressToken(); token != nil {
		prog = newProgress(ctx, req.Session, token, m.core.Reg.Counters())
		c.Subs = []execution.Subscriber{prog}
	}
	res, ce := m.core.Execute(ctx, c)
	if prog != nil {
		prog.finish()
	}
	if ce != nil {
		return toolError(ce.Msg), nil
	}
	env := api.Envelope{Success: res.Success(), Message: res.Message(), Data: call.V2Data(res)}
	sc, err := structured(env)
	if err != nil {
		return nil, err
	}
	out := &sdk.CallToolResult{Content: outputContent(res.Outputs), StructuredContent: sc, IsError: res.Status != execution.StatusOK}
	if res.Status != execution.StatusOK || len(out.Content) == 0 {
		out.Content = append(out.Content, &sdk.TextContent{Text: fmt.Sprintf("[%s] %s", res.Status, res.Message())})
	}
	return out, nil
}

// outputContent renders collected outputs as MCP content: stream text and
// text/plain as text, image/png (and the other raster images) as image
// content, text/html as text, errors as their name, value and traceback.
func outputContent(outs []*execution.Output) []sdk.Content {
	var cs []sdk.Content
	for _, o := range outs {
		switch o.Type {
		case "stream":
			if t := o.StreamText(); t != "" {
				cs = append(cs, &sdk.TextContent{Text: t})
			}
		case "error":
			t := o.Ename + ": " + o.Evalue
			if len(o.Traceback) > 0 {
				t += "\n" + strings.Join(o.Traceback, "\n")
			}
			cs = append(cs, &sdk.TextContent{Text: t})
		case "execute_result", "display_data":
			if c := bundleContent(o.Data); c != nil {
				cs = append(cs, c)
			}
		}
	}
	return cs
}

// bundleContent picks the one content a MIME bundle is shown as.
func bundleContent(data map[string]json.RawMessage) sdk.Content {
	str := func(mime string) (string, bool) {
		raw, ok := data[mime]
		if !ok {
			return "", false
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s, true
		}
		var parts []string // nbformat allows a list of lines
		if json.Unmarshal(raw, &parts) == nil {
			return strings.Join(parts, ""), true
		}
		return string(raw), true
	}
	for _, mime := range []string{"image/png", "image/jpeg", "image/gif", "image/webp"} {
		if s, ok := str(mime); ok {
			if b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), "")); err == nil {
				return &sdk.ImageContent{Data: b, MIMEType: mime}
			}
		}
	}
	for _, mime := range []string{"text/html", "text/markdown", "text/plain", "image/svg+xml", "text/latex", "application/json"} {
		if s, ok := str(mime); ok {
			return &sdk.TextContent{Text: s}
		}
	}
	return nil
}

func (m *Server) listSessions(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	_, tenant := callerOf(req)
	v := map[string]any{"sessions": m.core.SessionViews(tenant)}
	sc, err := structured(v)
	if err != nil {
		return nil, err
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(sc)}}, StructuredContent: sc}, nil
}

func (m *Server) deleteSession(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	f, bad := args(req)
	if bad != nil {
		return bad, nil
	}
	id := f.Str("session_id", true)
	if fe := f.Err(); fe != nil {
		return toolError("invalid arguments: " + fe.Error()), nil
	}
	_, tenant := callerOf(req)
	n := m.core.Reg.Delete(ctx, tenant, id)
	if n == 0 {
		return toolError(fmt.Sprintf("session %q not found", id)), nil
	}
	sc, _ := structured(map[string]any{"session_id": id, "closed": n})
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("session %q ended (%d runtime(s))", id, n)}}, StructuredContent: sc}, nil
}

// fileResult is a file tool's answer: its data as structured content and
// text, or the failure.
func fileResult(data map[string]any, err error, text string, extra ...sdk.Content) (*sdk.CallToolResult, error) {
	if err != nil {
		return toolError(err.Error()), nil
	}
	sc, merr := structured(data)
	if merr != nil {
		return nil, merr
	}
	if text == "" {
		text = string(sc)
	}
	return &sdk.CallToolResult{Content: append([]sdk.Content{&sdk.TextContent{Text: text}}, extra...), StructuredContent: sc}, nil
}

// filesOf is the file plane in the tool call's caller's view.
func (m *Server) filesOf(req *sdk.CallToolRequest) (*fsplane.Files, *sdk.CallToolResult) {
	_, tenant := callerOf(req)
	if tenant == "" {
		return nil, toolError("this call carries no caller")
	}
	view, err := m.core.View(tenant)
	if err != nil {
		return nil, toolError("the caller's file system is not available: " + err.Error())
	}
	return m.files.For(view), nil
}

func (m *Server) readFile(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	f, bad := args(req)
	if bad != nil {
		return bad, nil
	}
	p := f.Str("path", true)
	if fe := f.Err(); fe != nil {
		return toolError("invalid arguments: " + fe.Error()), nil
	}
	files, bad := m.filesOf(req)
	if bad != nil {
		return bad, nil
	}
	data, err := files.Read(p)
	if err != nil {
		return fileResult(nil, err, "")
	}
	content, _ := data["content"].(string)
	if data["encoding"] == "utf-8" {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: content}}}, nil
	}
	raw, _ := base64.StdEncoding.DecodeString(content)
	if mime := http.DetectContentType(raw); strings.HasPrefix(mime, "image/") && mime != "image/svg+xml" {
		return fileResult(data, nil, fmt.Sprintf("%s: %s, %d bytes", data["path"], mime, len(raw)), &sdk.ImageContent{Data: raw, MIMEType: mime})
	}
	return fileResult(data, nil, fmt.Sprintf("%s: binary file of %d bytes; structuredContent.content holds it as base64", data["path"], len(raw)))
}

func (m *Server) writeFile(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	f, bad := args(req)
	if bad != nil {
		return bad, nil
	}
	p, content := f.Str("path", true), f.Str("content", true)
	enc, appendMode := f.Str("encoding", false), f.Bool("append", false)
	if fe := f.Err(); fe != nil {
		return toolError("invalid arguments: " + fe.Error()), nil
	}
	files, bad := m.filesOf(req)
	if bad != nil {
		return bad, nil
	}
	data, err := files.Write(p, content, enc, appendMode)
	if err != nil {
		return fileResult(nil, err, "")
	}
	return fileResult(data, nil, fmt.Sprintf("wrote %v bytes to %v", data["size"], data["path"]))
}

func (m *Server) listFiles(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	f, bad := args(req)
	if bad != nil {
		return bad, nil
	}
	p := f.Str("path", true)
	if fe := f.Err(); fe != nil {
		return toolError("invalid arguments: " + fe.Error()), nil
	}
	files, bad := m.filesOf(req)
	if bad != nil {
		return bad, nil
	}
	data, err := files.List(p)
	return fileResult(data, err, "")
}

// ProgressBytes bounds the output waiting to be sent as progress
// notifications for one call; past it outputs are left out of the progress
// (the result still has them) and counted (MCPProgressDrops, queue_full).
const ProgressBytes = 4 << 20

// maxProgressText bounds one notification's message.
const maxProgressText = 64 << 10

// progress is the subscriber of one execute_code call that asked for
// progress: it queues each output as the runtime sends it (Deliver never
// blocks) and a goroutine of its own sends them as notifications/progress
// on the call's stream, in order, before the result.
//
// Outputs that are not sent are counted by reason: queue_full past
// ProgressBytes, not_sent when the sender stopped first (the client
// did not read, or went away).
type progress struct {
	ctx      context.Context
	cancel   context.CancelFunc
	sess     *sdk.ServerSession
	token    any
	counters *stream.Counters

	mu      sync.Mutex
	queue   []*execution.Output
	bytes   int
	ended   bool
	stopped bool // the sender returned: nothing more is sent

	wake chan struct{} // cap 1
	done chan struct{} // closed when the sender returned
}

func newProgress(ctx context.Context, sess *sdk.ServerSession, token any, c *stream.Counters) *progress {
	p := &progress{sess: sess, token: token, counters: c, wake: make(chan struct{}, 1), done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(ctx)
	go p.send()
	return p
}

// Deliver queues one output event.
func (p *progress) Deliver(ev execution.Event) {
	if ev.Out == nil || ev.Msg == nil {
		return
	}
	size := ev.Msg.Size()
	p.mu.Lock()
	switch {
	case p.ended:
		p.mu.Unlock()
		return
	case p.stopped:
		p.mu.Unlock()
		p.drop("not_sent", 1)
		return
	case p.bytes+size > ProgressBytes:
		p.mu.Unlock()
		p.drop("queue_full", 1)
		return
	}
	p.queue = append(p.queue, ev.Out)
	p.bytes += size
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// finish stops taking outputs and waits until what was queued has been
// sent; after 10 s it stops the sender (a client that does not read) and
// waits for it to return.
func (p *progress) finish() {
	p.mu.Lock()
	p.ended = true
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	}
	p.cancel()
	<-p.done
}

// drop counts n outputs left out of the progress for why.
func (p *progress) drop(why string, n int) {
	if n > 0 {
		p.counters.Count(ProgressDrops, why, int64(n))
	}
}

func (p *progress) send() {
	defer close(p.done)
	var batch []*execution.Output // taken from the queue, not all sent yet
	defer func() {
		p.mu.Lock()
		left := len(batch) + len(p.queue)
		p.queue, p.bytes, p.stopped = nil, 0, true
		p.mu.Unlock()
		p.drop("not_sent", left)
	}()
	n := 0
	for {
		select {
		case <-p.wake:
		case <-p.ctx.Done():
			return
		}
		p.mu.Lock()
		var ended bool
		batch, ended = p.queue, p.ended
		p.queue, p.bytes = nil, 0
		p.mu.Unlock()
		for len(batch) > 0 {
			n++
			ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
			err := p.sess.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
				ProgressToken: p.token, Progress: float64(n), Message: progressText(batch[0]),
			})
			cancel()
			if err != nil {
				return
			}
			batch = batch[1:]
		}
		if ended {
			p.mu.Lock()
			left := len(p.queue)
			p.mu.Unlock()
			if left == 0 {
				return
			}
		}
	}
}

// progressText is one output as a progress message: stream text as it
// came, the others named.
func progressText(o *execution.Output) string {
	var t string
	switch o.Type {
	case "stream":
		t = o.StreamText()
	case "error":
		t = o.Ename + ": " + o.Evalue
	case "execute_result", "display_data":
		if c, ok := bundleContent(o.Data).(*sdk.TextContent); ok {
			t = c.Text
		} else {
			mimes := make([]string, 0, len(o.Data))
			for k := range o.Data {
				mimes = append(mimes, k)
			}
			sort.Strings(mimes)
			t = "[" + o.Type + ": " + strings.Join(mimes, ", ") + "]"
		}
	default:
		t = "[" + o.Type + "]"
	}
	if len(t) > maxProgressText {
		n := maxProgressText
		for n > 0 && !utf8.RuneStart(t[n]) {
			n--
		}
		t = t[:n] + "…"
	}
	return t
}

var _ execution.Subscriber = (*progress)(nil)
