package call

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/aiod/aiod/gateway/api"
)

// Languages are the languages calls run, in the order listings use.
var Languages = []string{"python", "javascript", "bash"}

// KnownLanguage reports whether lang is one of Languages.
func KnownLanguage(lang string) bool {
	return lang == "python" || lang == "javascript" || lang == "bash"
}

// LanguageError is the 422 of an unknown language in field name.
func LanguageError(in, name, lang string) *api.FieldError {
	return &api.FieldError{In: in, Field: name, Type: "literal_error",
		Msg: fmt.Sprintf("unsupported language %q: use python, javascript or bash", lang)}
}

// ParseTimeout reads an optional timeout in seconds within (0, max]; a
// call without one gets the default.
func (c *Core) ParseTimeout(f *api.Fields, name string) (time.Duration, *api.FieldError) {
	v, ok := f.Float(name)
	if err := f.Err(); err != nil {
		return 0, err
	}
	if !ok {
		return c.Cfg.DefaultTimeout, nil
	}
	max := c.Cfg.MaxTimeout.Seconds()
	if v <= 0 || v > max || math.IsNaN(v) {
		return 0, &api.FieldError{In: "body", Field: name, Type: "less_than_equal",
			Msg: fmt.Sprintf("must be more than 0 and at most %g seconds, got %g", max, v)}
	}
	return time.Duration(v * float64(time.Second)), nil
}

// ValidSessionID accepts ids that survive a URL path unescaped (session
// ids, execution ids), naming the field name when it refuses one.
func ValidSessionID(name, id string) *api.FieldError {
	if len(id) > 128 {
		return &api.FieldError{In: "body", Field: name, Msg: "must be at most 128 characters", Type: "string_too_long"}
	}
	for _, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':' || c == '@'
		if !ok {
			return &api.FieldError{In: "body", Field: name, Type: "string_pattern_mismatch",
				Msg: fmt.Sprintf("may hold only letters, digits and - _ . : @ (got %q)", id)}
		}
	}
	return nil
}

// ParseExecute validates an execute request in the v2 shape: POST
// /v2/code/execute, a WebSocket execute message (whose own keys are named
// in known), MCP's execute_code arguments. Types are strict; fields it does
// not know are ignored with a warning in the call's result. cwd and env
// (an object of strings; AIO_* refused) apply to a runtime the call starts;
// for bash, env applies to this execution (Core.run).
func (c *Core) ParseExecute(body []byte, known ...string) (Call, *api.FieldError) {
	f, fe := api.DecodeStrict(body)
	if fe != nil {
		return Call{}, fe
	}
	f.Known(known...)
	call := Call{Language: f.Str("language", true), Code: f.Code("code")}
	if sid := f.OptStr("session_id"); sid != nil {
		call.SessionID = *sid
	}
	eid := f.OptStr("execution_id")
	if err := f.Err(); err != nil {
		return call, err
	}
	if eid != nil {
		if *eid == "" {
			return call, &api.FieldError{In: "body", Field: "execution_id", Type: "string_too_short", Msg: "must be 1 to 128 characters; leave it out to get one made"}
		}
		if err := ValidSessionID("execution_id", *eid); err != nil {
			return call, err
		}
		call.ExecutionID = *eid
	}
	if !KnownLanguage(call.Language) {
		return call, LanguageError("body", "language", call.Language)
	}
	if err := ValidSessionID("session_id", call.SessionID); err != nil {
		return call, err
	}
	t, err := c.ParseTimeout(f, "timeout")
	call.Timeout = t
	if err != nil {
		return call, err
	}
	if call.Cwd, err = c.parseCwd(f, "cwd"); err != nil {
		return call, err
	}
	if call.Env, err = ParseEnv(f, "env"); err != nil {
		return call, err
	}
	if call.SessionID == "" {
		for _, name := range f.Unknown() {
			if likeSessionID(name) {
				return call, &api.FieldError{In: "body", Field: name, Type: "extra_forbidden",
					Msg: `is not a field; did you mean "session_id"? Without session_id the code runs in a temporary runtime and its state is lost`}
			}
		}
	}
	call.Warnings = UnknownWarnings(f)
	if len(call.Warnings) > 0 {
		c.Log.Debug("request fields ignored", "warnings", call.Warnings)
	}
	return call, nil
}

// likeSessionID reports whether an unknown field name looks like a
// misspelt session_id ("sesion_id", "sessionId", "session", "sid"): a call
// that meant a session but names none would run in a throwaway runtime and
// answer success with its state gone, so v2 refuses it instead of warning.
func likeSessionID(name string) bool {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	n := b.String()
	return n == "sid" || strings.Contains(n, "session") || editDistance(n, "sessionid") <= 2
}

// editDistance is the Levenshtein distance between two short ASCII names.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// UnknownWarnings says, for each field of a request that was not read,
// that it was ignored: a misspelt session_id must not pass unnoticed.
func UnknownWarnings(f *api.Fields) []string {
	var out []string
	for _, name := range f.Unknown() {
		out = append(out, fmt.Sprintf("unknown field %q ignored", name))
	}
	return out
}
