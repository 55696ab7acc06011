package call

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
)

// Completion and inspection, from the session's own runtime. The session
// is created on first use, as an execute would. A session that runs code
// answers when it can: a kernel serves shell requests in order, so it
// answers when the running cell ends; the wait is bounded by AskTimeout,
// after which the answer is 504 naming the busy session.

// AskTimeout bounds a completion or inspection.
const AskTimeout = 10 * time.Second

// Ask is a validated complete or inspect request.
type Ask struct {
	Call
	Inspect     bool // inspect; else complete
	CursorPos   int
	DetailLevel int
}

// ParseAsk validates a complete (or, with inspect, an inspect) request:
// {language, session_id, code, cursor_pos, detail_level?}. known names a
// message's own keys (the WebSocket's type and id).
func ParseAsk(body []byte, inspect bool, known ...string) (Ask, *api.FieldError) {
	f, fe := api.DecodeStrict(body) // wrong types are 422s
	if fe != nil {
		return Ask{}, fe
	}
	f.Known(known...)
	a := Ask{Inspect: inspect}
	a.Language, a.Code = f.Str("language", true), f.Code("code")
	a.SessionID = f.Str("session_id", true)
	pos, posSet := f.Float("cursor_pos")
	detail, _ := f.Float("detail_level")
	if err := f.Err(); err != nil {
		return a, err
	}
	if !KnownLanguage(a.Language) {
		return a, LanguageError("body", "language", a.Language)
	}
	if a.SessionID == "" {
		return a, &api.FieldError{In: "body", Field: "session_id", Type: "missing", Msg: "is required: completion asks a session's runtime"}
	}
	if err := ValidSessionID("session_id", a.SessionID); err != nil {
		return a, err
	}
	n := len([]rune(a.Code))
	if !posSet {
		pos = float64(n)
	}
	if pos != float64(int(pos)) || pos < 0 || int(pos) > n {
		return a, &api.FieldError{In: "body", Field: "cursor_pos", Type: "less_than_equal",
			Msg: fmt.Sprintf("must be a whole number from 0 to the code's length in characters (%d), got %g", n, pos)}
	}
	a.CursorPos = int(pos)
	if inspect {
		if detail != 0 && detail != 1 {
			return a, &api.FieldError{In: "body", Field: "detail_level", Type: "literal_error", Msg: "must be 0 or 1"}
		}
		a.DetailLevel = int(detail)
	}
	return a, nil
}

// Ask answers a completion ({matches, cursor_start, cursor_end, metadata})
// or an inspection ({found, data, metadata}) from a's session.
func (c *Core) Ask(a Ask) (map[string]any, *Error) {
	sess, _, e := c.OpenSession(a.Call)
	if e != nil {
		return nil, e
	}
	// Starting the session's runtime does not count against the ask's
	// time, as it does not against a call's timeout: a cold start under
	// load takes longer than AskTimeout, and cutting it wastes it.
	sctx, scancel := context.WithTimeout(c.ctx, 3*max(c.Cfg.KernelStartTimeout, time.Minute))
	_, err := sess.EnsureRuntime(sctx)
	scancel()
	if err != nil {
		return nil, MapError(err, a.Call)
	}
	ctx, cancel := context.WithTimeout(c.ctx, AskTimeout)
	defer cancel()
	var v map[string]any
	var md json.RawMessage
	if a.Inspect {
		r, ierr := sess.Inspect(ctx, a.Code, a.CursorPos, a.DetailLevel)
		if err = ierr; err == nil {
			v, md = map[string]any{"found": r.Found, "data": r.Data}, r.Metadata
		}
	} else {
		r, cerr := sess.Complete(ctx, a.Code, a.CursorPos)
		if err = cerr; err == nil {
			v, md = map[string]any{"matches": r.Matches, "cursor_start": r.CursorStart, "cursor_end": r.CursorEnd}, r.Metadata
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, &Error{Status: fasthttp.StatusGatewayTimeout, Msg: fmt.Sprintf(
			"session %q gave no answer within %s: it is running code, and its runtime answers when that ends", a.SessionID, AskTimeout)}
	case err != nil:
		return nil, MapError(err, a.Call)
	}
	if len(md) == 0 || string(md) == "null" {
		md = json.RawMessage("{}")
	}
	v["metadata"] = md
	return v, nil
}
