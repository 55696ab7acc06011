package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/stream"
)

// Completion and inspection, from the session's own runtime:
//
//	POST /v2/code/complete {language, session_id, code, cursor_pos}
//	  -> {matches, cursor_start, cursor_end, metadata}
//	POST /v2/code/inspect  {language, session_id, code, cursor_pos, detail_level?}
//	  -> {found, data, metadata}
//
// The session is created on first use, as an execute would. A session that
// runs code answers when it can: a kernel serves shell requests in order,
// so it answers when the running cell ends; the wait is bounded by
// askTimeout, after which the answer is 504 naming the busy session.

// askTimeout bounds a completion or inspection.
const askTimeout = 10 * time.Second

// askCall is a validated complete or inspect request.
type askCall struct {
	execCall
	CursorPos   int
	DetailLevel int
}

func (s *Server) parseAsk(body []byte, inspect bool, known ...string) (askCall, *api.FieldError) {
	f, fe := api.DecodeStrict(body) // v2: wrong types are 422s
	if fe != nil {
		return askCall{}, fe
	}
	f.Known(known...)
	c := askCall{}
	c.Language, c.Code = f.Str("language", true), f.Str("code", true)
	c.SessionID = f.Str("session_id", true)
	pos, posSet := f.Float("cursor_pos")
	detail, _ := f.Float("detail_level")
	if err := f.Err(); err != nil {
		return c, err
	}
	if !codeLanguages[c.Language] {
		return c, &api.FieldError{In: "body", Field: "language", Type: "literal_error",
			Msg: fmt.Sprintf("unsupported language %q: use python or javascript", c.Language)}
	}
	if c.SessionID == "" {
		return c, &api.FieldError{In: "body", Field: "session_id", Type: "missing", Msg: "is required: completion asks a session's runtime"}
	}
	if err := validSessionID("session_id", c.SessionID); err != nil {
		return c, err
	}
	n := len([]rune(c.Code))
	if !posSet {
		pos = float64(n)
	}
	if pos != float64(int(pos)) || pos < 0 || int(pos) > n {
		return c, &api.FieldError{In: "body", Field: "cursor_pos", Type: "less_than_equal",
			Msg: fmt.Sprintf("must be a whole number from 0 to the code's length in characters (%d), got %g", n, pos)}
	}
	c.CursorPos = int(pos)
	if inspect {
		if detail != 0 && detail != 1 {
			return c, &api.FieldError{In: "body", Field: "detail_level", Type: "literal_error", Msg: "must be 0 or 1"}
		}
		c.DetailLevel = int(detail)
	}
	return c, nil
}

// ask runs a completion or inspection on c's session.
func (s *Server) ask(c askCall, do func(ctx context.Context, sess *stream.Session, c askCall) (any, error)) (any, *callError) {
	sess, _, ce := s.openSession(c.execCall)
	if ce != nil {
		return nil, ce
	}
	ctx, cancel := context.WithTimeout(s.reqCtx(), askTimeout)
	defer cancel()
	v, err := do(ctx, sess, c)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, &callError{Status: fasthttp.StatusGatewayTimeout, Msg: fmt.Sprintf(
			"session %q gave no answer within %s: it is running code, and its runtime answers when that ends", c.SessionID, askTimeout)}
	}
	if err != nil {
		return nil, runError(err, c.execCall)
	}
	return v, nil
}

func completeOf(ctx context.Context, sess *stream.Session, c askCall) (any, error) {
	r, err := sess.Complete(ctx, c.Code, c.CursorPos)
	if err != nil {
		return nil, err
	}
	md := r.Metadata
	if len(md) == 0 || string(md) == "null" {
		md = json.RawMessage("{}")
	}
	return map[string]any{"matches": r.Matches, "cursor_start": r.CursorStart, "cursor_end": r.CursorEnd, "metadata": md}, nil
}

func inspectOf(ctx context.Context, sess *stream.Session, c askCall) (any, error) {
	r, err := sess.Inspect(ctx, c.Code, c.CursorPos, c.DetailLevel)
	if err != nil {
		return nil, err
	}
	md := r.Metadata
	if len(md) == 0 || string(md) == "null" {
		md = json.RawMessage("{}")
	}
	return map[string]any{"found": r.Found, "data": r.Data, "metadata": md}, nil
}

func (s *Server) v2Complete(ctx *fasthttp.RequestCtx) { s.v2Ask(ctx, false) }
func (s *Server) v2Inspect(ctx *fasthttp.RequestCtx)  { s.v2Ask(ctx, true) }

func (s *Server) v2Ask(ctx *fasthttp.RequestCtx, inspect bool) {
	c, fe := s.parseAsk(ctx.PostBody(), inspect)
	c.Owner, c.Tenant = ownerOf(ctx), tenantOf(ctx)
	if fe != nil {
		api.Invalid(ctx, fe)
		return
	}
	do := completeOf
	if inspect {
		do = inspectOf
	}
	v, ce := s.ask(c, do)
	if ce != nil {
		ce.write(ctx)
		return
	}
	api.OK(ctx, v)
}
