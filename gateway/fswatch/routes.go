// Package fswatch serves file watches, the agent_sandbox reference's
// /v1/file/watch routes and the same at /v2/fs/watch: watchers (package
// fsplane/watch) over a folder of the caller's view, polled from a cursor
// (long-polling), followed as Server-Sent Events, or waited on for one
// file's event.
package fswatch

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"sync"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/gateway/fsplane/watch"
)

// Answers are resource-style JSON, as the reference's prose says, and
// the same fields again under the envelope's data, as its example reads
// them (.data.watcher_id): a client reading either way finds them.
// Failures are HTTP statuses with the envelope (404 an unknown watcher,
// 422 naming a field, 409 past the watcher cap).

// Surface is the /v1/file/watch routes.
type Surface struct {
	core   *call.Core
	ws     *watch.Watchers
	reaper *sync.Once
	v2     bool // answers a bad field in v2's 422 shape (the /v2/fs/watch routes)
}

// New makes the surface on ws, the daemon's watchers; they stop when the
// core closes.
func New(core *call.Core, ws *watch.Watchers) *Surface {
	return &Surface{core: core, ws: ws, reaper: &sync.Once{}}
}

// Register adds the routes: /v1/file/watch, and the same watches at
// /v2/fs/watch (v2's 422 shape; the answers are envelopes already).
func (s *Surface) Register(r *router.Router) {
	v2 := *s
	v2.v2 = true
	for _, x := range []struct {
		s    *Surface
		base string
	}{{s, "/v1/file/watch"}, {&v2, "/v2/fs/watch"}} {
		r.POST(x.base, x.s.create)
		r.GET(x.base, x.s.list)
		r.POST(x.base+"/wait", x.s.wait)
		r.POST(x.base+"/{watcher_id}/poll", x.s.poll)
		r.GET(x.base+"/{watcher_id}/events", x.s.events)
		r.DELETE(x.base+"/{watcher_id}", x.s.remove)
	}
}

// invalid answers a bad request field in the surface's 422 shape.
func (s *Surface) invalid(ctx *fasthttp.RequestCtx, fe *api.FieldError) {
	if s.v2 {
		api.Invalid(ctx, fe)
		return
	}
	api.InvalidV1(ctx, fe)
}

// startReaper starts, once, what stops idle watchers and, when the core
// closes, every watcher.
func (s *Surface) startReaper() {
	s.reaper.Do(func() { s.core.Go(s.reap) })
}

// reap stops idle watchers every minute, and every watcher once the core
// closes.
func (s *Surface) reap() {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-s.core.Ctx().Done():
			s.ws.CloseAll()
			return
		case now := <-tick.C:
			s.ws.Reap(now)
		}
	}
}

// answer writes v at the top level and under data.
func answer(ctx *fasthttp.RequestCtx, msg string, v map[string]any) {
	out := map[string]any{"success": true, "message": msg, "data": v}
	for k, x := range v {
		out[k] = x
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, out)
}

// POST /v1/file/watch {path, recursive?, exclude?, debounce?, include_patterns?}
func (s *Surface) create(ctx *fasthttp.RequestCtx) {
	f, fe := api.Decode(ctx.PostBody())
	if fe != nil {
		s.invalid(ctx, fe)
		return
	}
	spec := watch.Spec{Path: f.Str("path", true), Recursive: f.Bool("recursive", true), Exclude: watch.DefaultExclude,
		Include: []string{}, Debounce: watch.DefaultDebounceMS}
	if f.Has("exclude") {
		spec.Exclude = f.StrList("exclude")
	}
	if f.Has("include_patterns") {
		spec.Include = f.StrList("include_patterns")
	}
	if n, ok := f.Int("debounce"); ok {
		spec.Debounce = int(n)
	}
	if fe := f.Err(); fe != nil {
		s.invalid(ctx, fe)
		return
	}
	if spec.Debounce < watch.MinDebounceMS || spec.Debounce > watch.MaxDebounceMS {
		s.invalid(ctx, &api.FieldError{In: "body", Field: "debounce", Type: "less_than_equal",
			Msg: fmt.Sprintf("must be %d to %d milliseconds, got %d", watch.MinDebounceMS, watch.MaxDebounceMS, spec.Debounce)})
		return
	}
	if spec.Exclude == nil {
		spec.Exclude = []string{}
	}
	if spec.Include == nil {
		spec.Include = []string{}
	}
	spec.Path = watch.CleanPath(spec.Path, s.core.Workspace())
	view, err := s.core.ViewOf(ctx)
	if err != nil {
		api.Fail(ctx, fasthttp.StatusServiceUnavailable, "the caller's files: "+err.Error())
		return
	}
	if _, err := view.Stat(spec.Path); err != nil {
		status := fasthttp.StatusNotFound
		if !errors.Is(err, fs.ErrNotExist) {
			status = fasthttp.StatusForbidden
		}
		api.Fail(ctx, status, fmt.Sprintf("cannot watch %s: %v", spec.Path, err))
		return
	}
	s.startReaper()
	w, err := s.ws.Start(call.Tenant(ctx), view, spec)
	switch {
	case errors.Is(err, watch.ErrTooMany):
		api.Fail(ctx, fasthttp.StatusConflict, err.Error())
	case err != nil:
		api.Fail(ctx, fasthttp.StatusServiceUnavailable, "watch "+spec.Path+": "+err.Error())
	default:
		answer(ctx, "watching "+spec.Path, w.Model())
	}
}

// GET /v1/file/watch
func (s *Surface) list(ctx *fasthttp.RequestCtx) {
	mine := s.ws.Mine(call.Tenant(ctx))
	list := []map[string]any{}
	for _, w := range mine {
		list = append(list, w.Model())
	}
	answer(ctx, strconv.Itoa(len(list))+" watchers", map[string]any{"watchers": list, "count": len(list)})
}

// lookup is the caller's watcher the path names, or it answers 404.
func (s *Surface) lookup(ctx *fasthttp.RequestCtx) *watch.Watcher {
	id, fe := api.PathParam(ctx, "watcher_id")
	if fe != nil {
		s.invalid(ctx, fe)
		return nil
	}
	w := s.ws.Get(call.Tenant(ctx), id)
	if w == nil {
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("watcher %q not found", id))
	}
	return w
}

// DELETE /v1/file/watch/{watcher_id}
func (s *Surface) remove(ctx *fasthttp.RequestCtx) {
	if w := s.lookup(ctx); w != nil {
		s.ws.Stop(w)
		answer(ctx, "stopped", map[string]any{"watcher_id": w.ID, "stopped": true})
	}
}

// POST /v1/file/watch/{watcher_id}/poll {cursor?, limit?, timeout?}
func (s *Surface) poll(ctx *fasthttp.RequestCtx) {
	w := s.lookup(ctx)
	if w == nil {
		return
	}
	f, fe := api.Decode(ctx.PostBody())
	if fe != nil {
		s.invalid(ctx, fe)
		return
	}
	cursor, limit, timeout := int64(0), int64(100), int64(0)
	if n, ok := f.Int("cursor"); ok {
		cursor = n
	}
	if n, ok := f.Int("limit"); ok {
		limit = n
	}
	if n, ok := f.Int("timeout"); ok {
		timeout = n
	}
	if fe := f.Err(); fe != nil {
		s.invalid(ctx, fe)
		return
	}
	for field, bad := range map[string]bool{"cursor": cursor < 0, "limit": limit < 1 || limit > 1000, "timeout": timeout < 0 || timeout > 60} {
		if bad {
			s.invalid(ctx, &api.FieldError{In: "body", Field: field, Type: "value_error",
				Msg: "cursor is 0 or more, limit 1 to 1000, timeout 0 to 60 seconds"})
			return
		}
	}
	defer w.Attach()()
	deadline := time.NewTimer(time.Duration(timeout) * time.Second)
	defer deadline.Stop()
	for {
		evs, next, overflow, changed := w.Since(cursor, int(limit))
		if len(evs) > 0 || overflow || timeout == 0 {
			answer(ctx, strconv.Itoa(len(evs))+" events", map[string]any{"watcher_id": w.ID, "events": evs,
				"cursor": next, "overflow": overflow, "has_more": len(evs) == int(limit)})
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			timeout = 0
		case <-w.Stopped():
			api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("watcher %q was stopped", w.ID))
			return
		case <-s.core.Ctx().Done():
			api.Fail(ctx, fasthttp.StatusServiceUnavailable, "aiod is shutting down")
			return
		}
	}
}

// GET /v1/file/watch/{watcher_id}/events: Server-Sent Events, from now:
// watch_started, then file_change for each event (id WATCHER:SEQ; a
// Last-Event-ID header resumes after that seq), overflow when events were
// dropped before this stream read them; ": keepalive" every 15 s.
func (s *Surface) events(ctx *fasthttp.RequestCtx) {
	w := s.lookup(ctx)
	if w == nil {
		return
	}
	cursor := w.Last() // from now
	if last := string(ctx.Request.Header.Peek("Last-Event-ID")); last != "" {
		if i := len(w.ID) + 1; len(last) > i && last[:i] == w.ID+":" {
			if n, err := strconv.ParseInt(last[i:], 10, 64); err == nil && n >= 0 {
				cursor = n
			}
		}
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	base, conn, wt := s.core.Ctx(), ctx.Conn(), s.core.Cfg.StreamWrite
	detach := w.Attach()
	ctx.SetBodyStreamWriter(func(bw *bufio.Writer) {
		defer detach()
		send := func(id, event string, v any) bool {
			b, _ := api.Marshal(v)
			if id != "" {
				_, _ = bw.WriteString("id: " + id + "\n")
			}
			_, _ = bw.WriteString("event: " + event + "\ndata: ")
			_, _ = bw.Write(b)
			_, _ = bw.WriteString("\n\n")
			return api.Flush(conn, bw, wt) == nil
		}
		api.Arm(conn, wt)
		if !send("", "watch_started", map[string]any{"watcher_id": w.ID, "path": w.Path, "cursor": cursor}) {
			return
		}
		tick := time.NewTicker(15 * time.Second)
		defer tick.Stop()
		for {
			evs, next, overflow, changed := w.Since(cursor, 1000)
			api.Arm(conn, wt)
			if overflow && !send("", "overflow", map[string]any{"watcher_id": w.ID, "cursor": next}) {
				return
			}
			for _, ev := range evs {
				if !send(w.ID+":"+strconv.FormatInt(ev.Seq, 10), "file_change", ev) {
					return
				}
			}
			cursor = next
			select {
			case <-changed:
			case <-tick.C:
				_, _ = bw.WriteString(": keepalive\n\n")
				if api.Flush(conn, bw, wt) != nil {
					return
				}
			case <-w.Stopped():
				return
			case <-base.Done():
				return
			}
		}
	})
}

// POST /v1/file/watch/wait {path, timeout?, event_types?}: the first event
// of that file from now (a create at once when it exists and create is
// asked for), or, after timeout seconds, 408 with event null.
func (s *Surface) wait(ctx *fasthttp.RequestCtx) {
	f, fe := api.Decode(ctx.PostBody())
	if fe != nil {
		s.invalid(ctx, fe)
		return
	}
	p := f.Str("path", true)
	timeout := int64(30)
	if n, ok := f.Int("timeout"); ok {
		timeout = n
	}
	types := []string{"create", "write", "remove", "rename", "chmod"}
	if f.Has("event_types") {
		types = f.StrList("event_types")
	}
	if fe := f.Err(); fe != nil {
		s.invalid(ctx, fe)
		return
	}
	if timeout < 1 || timeout > 300 {
		s.invalid(ctx, &api.FieldError{In: "body", Field: "timeout", Type: "less_than_equal", Msg: fmt.Sprintf("must be 1 to 300 seconds, got %d", timeout)})
		return
	}
	want := map[string]bool{}
	for _, t := range types {
		switch t {
		case "create", "write", "remove", "rename", "chmod":
			want[t] = true
		default:
			s.invalid(ctx, &api.FieldError{In: "body", Field: "event_types", Type: "enum", Msg: "each is create, write, remove, rename or chmod, got " + strconv.Quote(t)})
			return
		}
	}
	p = watch.CleanPath(p, s.core.Workspace())
	view, err := s.core.ViewOf(ctx)
	if err != nil {
		api.Fail(ctx, fasthttp.StatusServiceUnavailable, "the caller's files: "+err.Error())
		return
	}
	dir, name := parentOf(p)
	if fi, err := view.Stat(dir); err != nil || !fi.IsDir() {
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("cannot wait for %s: its folder %s is not there", p, dir))
		return
	}
	if want["create"] {
		if ev, ok := watch.Exists(view, dir, name); ok {
			answer(ctx, "it exists", map[string]any{"event": ev, "path": p})
			return
		}
	}
	s.startReaper()
	w, err := s.ws.Start(call.Tenant(ctx), view, watch.Spec{Path: dir, Exclude: []string{}, Include: []string{name}, Debounce: 100})
	if err != nil {
		status := fasthttp.StatusServiceUnavailable
		if errors.Is(err, watch.ErrTooMany) {
			status = fasthttp.StatusConflict
		}
		api.Fail(ctx, status, "wait for "+p+": "+err.Error())
		return
	}
	defer s.ws.Stop(w)
	if want["create"] {
		// Made between the look above and the watcher's first scan: that
		// scan holds it, so no event would come.
		if ev, ok := w.Seen(name); ok {
			answer(ctx, "it exists", map[string]any{"event": ev, "path": p})
			return
		}
	}
	deadline := time.NewTimer(time.Duration(timeout) * time.Second)
	defer deadline.Stop()
	var cursor int64
	for {
		evs, next, _, changed := w.Since(cursor, 1000)
		for _, ev := range evs {
			if ev.RelativePath == name && want[ev.Type] {
				answer(ctx, ev.Type, map[string]any{"event": ev, "path": p})
				return
			}
		}
		cursor = next
		select {
		case <-changed:
		case <-deadline.C:
			api.WriteJSON(ctx, fasthttp.StatusRequestTimeout, map[string]any{"success": false,
				"message": fmt.Sprintf("no %v event of %s within %d s", types, p, timeout), "event": nil, "path": p, "data": map[string]any{"event": nil, "path": p}})
			return
		case <-s.core.Ctx().Done():
			api.Fail(ctx, fasthttp.StatusServiceUnavailable, "aiod is shutting down")
			return
		}
	}
}

// parentOf splits an absolute clean path into its folder and name.
func parentOf(p string) (string, string) {
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '/' {
			return p[:i], p[i+1:]
		}
	}
	return "/", p[1:]
}
