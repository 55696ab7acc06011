// Package api holds what every aiod route shares: the JSON envelope, the two
// shapes of validation errors (v2's envelope and v1's FastAPI detail list),
// and a lenient-but-typed decoder for request bodies.
package api

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
)

// Envelope is the body of every JSON route: {"success","message","data"}.
type Envelope struct {
	Success bool   `json:"success"`
	Message string `json:"message"`
	Data    any    `json:"data"`
}

// Marshal encodes an answer: JSON without HTML escaping, so that code,
// tracebacks and messages keep their <, > and & (answers are not HTML;
// they are served as application/json with nosniff). goccy's
// MarshalNoEscape is not that: its "no escape" is about the heap, and it
// escapes HTML as Marshal does.
func Marshal(v any) ([]byte, error) { return json.MarshalWithOption(v, json.DisableHTMLEscape()) }

// WriteJSON writes v as JSON with the given status.
func WriteJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	if e, ok := v.(Envelope); ok {
		if a, ok := e.Data.(Appender); ok {
			b, err := AppendEnvelope(append(make([]byte, 0, 64+len(e.Message)+a.JSONSize()), '{'), e, a)
			if err == nil { // else Marshal says why
				ctx.SetStatusCode(status)
				ctx.SetContentType("application/json")
				ctx.Response.SetBodyRaw(append(b, '}'))
				return
			}
		}
	}
	b, err := Marshal(v)
	if err != nil {
		// Only our own types reach here; a marshal failure is a bug, but the
		// caller still gets an envelope, never an empty 500.
		b, _ = Marshal(Envelope{Message: "encode response: " + err.Error()})
		status = fasthttp.StatusInternalServerError
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.Response.SetBodyRaw(b) // b is ours alone: no copy
}

// OK answers 200 with success true.
func OK(ctx *fasthttp.RequestCtx, data any) {
	WriteJSON(ctx, fasthttp.StatusOK, Envelope{Success: true, Message: "ok", Data: data})
}

// Fail answers status with success false, the message, and data null.
func Fail(ctx *fasthttp.RequestCtx, status int, msg string) {
	WriteJSON(ctx, status, Envelope{Success: false, Message: msg, Data: nil})
}

// Invalid answers a v2 route's 422: the envelope, naming the field.
func Invalid(ctx *fasthttp.RequestCtx, fe *FieldError) {
	Fail(ctx, fasthttp.StatusUnprocessableEntity, fe.Error())
}

// ValidationDetail is one entry of FastAPI's 422 body.
type ValidationDetail struct {
	Loc  []any  `json:"loc"`
	Msg  string `json:"msg"`
	Type string `json:"type"`
}

// InvalidV1 answers a v1 route's 422 in the FastAPI shape the agent_sandbox
// SDK parses: {"detail":[{"loc":["body","code"],"msg":"...","type":"..."}]}.
func InvalidV1(ctx *fasthttp.RequestCtx, fe *FieldError) {
	loc := []any{fe.In}
	if fe.Field != "" {
		loc = append(loc, fe.Field)
	}
	WriteJSON(ctx, fasthttp.StatusUnprocessableEntity, map[string]any{
		"detail": []ValidationDetail{{Loc: loc, Msg: fe.Msg, Type: fe.Type}},
	})
}

// PathParam is the path parameter name of the matched route, percent-
// decoded once: fasthttp/router matches the raw path, so "user%40host"
// arrives as it was sent. Every route reads its path parameters through
// here. A malformed escape is a 422 naming the parameter.
func PathParam(ctx *fasthttp.RequestCtx, name string) (string, *FieldError) {
	raw, _ := ctx.UserValue(name).(string)
	if !strings.Contains(raw, "%") {
		return raw, nil
	}
	v, err := url.PathUnescape(raw)
	if err != nil {
		return "", &FieldError{In: "path", Field: name, Type: "value_error",
			Msg: fmt.Sprintf("is not valid percent-encoding (%q)", raw)}
	}
	return v, nil
}

// Appender is an answer's data that writes its own JSON, byte for byte
// what Marshal writes, into a buffer of about JSONSize bytes: a large
// answer (an execution's megabytes of output) is encoded once into one
// buffer of its size, where Marshal grows a pooled buffer by doubling,
// keeps it pooled, and copies the answer out of it.
type Appender interface {
	AppendJSON(dst []byte) ([]byte, error)
	JSONSize() int
}

// AppendEnvelope appends e's fields ("success", "message", "data"), without
// the braces around them, with its data a written by itself.
func AppendEnvelope(dst []byte, e Envelope, a Appender) ([]byte, error) {
	dst = strconv.AppendBool(append(dst, `"success":`...), e.Success)
	msg, err := Marshal(e.Message)
	if err != nil {
		return nil, err
	}
	dst = append(append(append(dst, `,"message":`...), msg...), `,"data":`...)
	return a.AppendJSON(dst)
}
