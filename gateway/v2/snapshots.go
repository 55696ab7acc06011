package v2

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/snapshot"
)

// The snapshot routes: a session's state saved into the state directory,
// and a fork of it (stream/snapshot does the work).
//
//	POST /v2/code/sessions/{id}/snapshot  {language?}               save the session's state now
//	POST /v2/code/sessions/{id}/fork      {session_id, language?}   a new session with a copy of its state

// snapshotView is a snapshot as the routes answer it.
type snapshotView struct {
	SnapshotID string            `json:"snapshot_id"`
	SessionID  string            `json:"session_id"`
	Language   string            `json:"language"`
	CreatedAt  time.Time         `json:"created_at"`
	Why        string            `json:"why"`
	Bytes      int64             `json:"bytes"`
	Saved      []string          `json:"saved"`
	Skipped    map[string]string `json:"skipped"`
	Reopened   map[string]string `json:"reopened"`
}

func viewOf(i *snapshot.Info) snapshotView {
	v := snapshotView{SnapshotID: i.SnapshotID, SessionID: i.SessionID, Language: i.Language, CreatedAt: i.Created.UTC(),
		Why: i.Why, Bytes: i.Bytes, Saved: i.Saved, Skipped: i.Skipped, Reopened: i.Reopened}
	if v.Reopened == nil {
		v.Reopened = map[string]string{}
	}
	return v
}

// snapshotArgs reads the path's id and the body's fields of the snapshot
// routes: language (python, the default) and, for a fork, session_id.
func (s *Surface) snapshotArgs(ctx *fasthttp.RequestCtx, fork bool) (id, lang, to string, ok bool) {
	id, fe := api.PathParam(ctx, "id")
	if fe == nil {
		fe = call.ValidSessionID("id", id)
		if fe != nil {
			fe.In = "path"
		}
	}
	if fe != nil {
		api.Invalid(ctx, fe)
		return "", "", "", false
	}
	f, fe := api.Decode(ctx.PostBody())
	if fe != nil {
		api.Invalid(ctx, fe)
		return "", "", "", false
	}
	lang = "python"
	if l := f.OptStr("language"); l != nil {
		lang = *l
	}
	if fork {
		to = f.Str("session_id", true)
	}
	if fe := f.Err(); fe != nil {
		api.Invalid(ctx, fe)
		return "", "", "", false
	}
	if u := f.Unknown(); len(u) > 0 {
		api.Invalid(ctx, &api.FieldError{In: "body", Field: u[0], Type: "extra_forbidden", Msg: "is not a field of this route"})
		return "", "", "", false
	}
	if !call.KnownLanguage(lang) {
		api.Invalid(ctx, call.LanguageError("body", "language", lang))
		return "", "", "", false
	}
	if fork {
		if fe := call.ValidSessionID("session_id", to); fe != nil {
			api.Invalid(ctx, fe)
			return "", "", "", false
		}
		if to == "" {
			api.Invalid(ctx, &api.FieldError{In: "body", Field: "session_id", Type: "string_too_short", Msg: "must name the new session"})
			return "", "", "", false
		}
	}
	if s.snaps == nil {
		api.Fail(ctx, fasthttp.StatusConflict, "snapshots need a state directory (--state-dir), and this server has none")
		return "", "", "", false
	}
	return id, lang, to, true
}

// saveError answers a failed save.
func saveError(ctx *fasthttp.RequestCtx, id string, err error) {
	var ue *snapshot.UnsupportedError
	switch {
	case errors.As(err, &ue):
		api.Invalid(ctx, &api.FieldError{In: "body", Field: "language", Type: "literal_error", Msg: ue.Error()})
	case errors.Is(err, stream.ErrNoRuntime):
		api.Fail(ctx, fasthttp.StatusConflict, fmt.Sprintf("session %q has no live runtime: nothing to snapshot", id))
	case errors.Is(err, stream.ErrSessionClosed):
		api.Fail(ctx, fasthttp.StatusConflict, fmt.Sprintf("session %q was closed before its snapshot ran", id))
	default:
		api.Fail(ctx, fasthttp.StatusConflict, fmt.Sprintf("session %q could not be saved: %v", id, err))
	}
}

func (s *Surface) v2SnapshotSession(ctx *fasthttp.RequestCtx) {
	id, lang, _, ok := s.snapshotArgs(ctx, false)
	if !ok {
		return
	}
	tenant := call.Tenant(ctx)
	sess := s.reg.Get(tenant, lang, id)
	if sess == nil {
		if info, waiting := s.snaps.Latest(snapshot.Key{Tenant: tenant, Language: lang, ID: id}); info != nil && waiting {
			api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true,
				Message: fmt.Sprintf("session %q is saved, not running: this is its latest snapshot", id), Data: viewOf(info)})
			return
		}
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("session %q not found", id))
		return
	}
	info, err := s.snaps.Save(s.core.Ctx(), sess, snapshot.WhyRequest)
	if err != nil {
		saveError(ctx, id, err)
		return
	}
	api.OK(ctx, viewOf(info))
}

// forkData is the fork route's answer.
type forkData struct {
	SessionID    string            `json:"session_id"`
	ForkedFrom   string            `json:"forked_from"`
	Language     string            `json:"language"`
	SnapshotID   string            `json:"snapshot_id"`
	Restored     bool              `json:"restored"`
	FreshRuntime bool              `json:"fresh_runtime,omitempty"`
	Skipped      map[string]string `json:"skipped"`
}

func (s *Surface) v2ForkSession(ctx *fasthttp.RequestCtx) {
	from, lang, to, ok := s.snapshotArgs(ctx, true)
	if !ok {
		return
	}
	tenant := call.Tenant(ctx)
	toKey := snapshot.Key{Tenant: tenant, Language: lang, ID: to}
	fromKey := snapshot.Key{Tenant: tenant, Language: lang, ID: from}
	// A session being reclaimed for idleness has left the registry (its
	// name reserved first) but is not saved until its save is stored: a
	// name not live is looked for among the saved ones once that ends.
	wctx, cancel := context.WithTimeout(s.core.Ctx(), s.snaps.Config().SaveTimeout)
	defer cancel()
	exists := s.reg.Get(tenant, lang, to) != nil
	if !exists {
		s.snaps.AwaitSaves(wctx, toKey)
		exists = s.reg.Get(tenant, lang, to) != nil || s.snaps.Pending(toKey)
	}
	if exists {
		api.Fail(ctx, fasthttp.StatusConflict, fmt.Sprintf("session %q exists; fork into a new session id", to))
		return
	}
	var src *snapshot.Info
	live := s.reg.Get(tenant, lang, from)
	if live == nil {
		s.snaps.AwaitSaves(wctx, fromKey)
	}
	if live != nil {
		info, err := s.snaps.Save(s.core.Ctx(), live, snapshot.WhyFork)
		if err != nil {
			saveError(ctx, from, err)
			return
		}
		src = info
	} else if info, waiting := s.snaps.Latest(fromKey); info != nil && waiting {
		src = info // a saved session: fork from its snapshot
	} else {
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("session %q not found", from))
		return
	}
	c := call.Call{Language: lang, SessionID: to, Owner: call.Owner(ctx), Tenant: tenant}
	sess, created, cerr := s.core.OpenSession(c)
	if cerr != nil {
		cerr.Write(ctx)
		return
	}
	if !created {
		api.Fail(ctx, fasthttp.StatusConflict, fmt.Sprintf("session %q exists; fork into a new session id", to))
		return
	}
	info, err := s.snaps.Fork(src, toKey)
	if err != nil {
		s.reg.DeleteSession(s.core.Ctx(), sess)
		api.Fail(ctx, fasthttp.StatusConflict, fmt.Sprintf("fork session %q: %v", from, err))
		return
	}
	res, err := sess.Prepare(s.core.Ctx(), s.cfg.KernelStartTimeout+s.snaps.Config().SaveTimeout)
	if err != nil {
		call.MapError(err, c).Write(ctx)
		return
	}
	d := forkData{SessionID: to, ForkedFrom: from, Language: lang, SnapshotID: info.SnapshotID, Restored: res.Restored,
		FreshRuntime: res.Fresh, Skipped: res.Skipped}
	if d.Skipped == nil {
		d.Skipped = map[string]string{}
	}
	msg := fmt.Sprintf("session %q forked from %q", to, from)
	if !res.Restored {
		msg = res.Message()
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: res.Restored, Message: msg, Data: d})
}

// savedViews lists tenant's saved sessions (state "saved": a snapshot
// waits to be restored on their next use) that no live session shadows.
func (s *Surface) savedViews(tenant string) []call.SessionView {
	if s.snaps == nil {
		return nil
	}
	var out []call.SessionView
	for _, i := range s.snaps.Saved(tenant) {
		if s.reg.Get(tenant, i.Language, i.SessionID) != nil {
			continue
		}
		at := i.Created.UTC()
		out = append(out, call.SessionView{SessionID: i.SessionID, Language: i.Language, State: "saved",
			SnapshotID: i.SnapshotID, SavedAt: &at, CreatedAt: at, LastUsed: at, IdleSeconds: time.Since(at).Seconds(),
			Queued: []call.ExecRef{}})
	}
	return out
}
