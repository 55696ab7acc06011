package fsplane

import (
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
)

// okV1 answers a v1 success with the route's result model as data.
func okV1(ctx *fasthttp.RequestCtx, msg string, data any) {
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: msg, Data: data})
}

// failV1 answers an expected file-system failure the v1 way: HTTP 200,
// success false, and a complete FileOperationError as data.
func (s *server) failV1(ctx *fasthttp.RequestCtx, op, path string, err error) {
	fe := fileError(op, path, err)
	s.logUnexpected(op, path, fe.ErrorType, err)
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: false, Message: fe.Message, Data: fe})
}

// failV2 answers a v2 failure with the status that fits it and data null.
func (s *server) failV2(ctx *fasthttp.RequestCtx, op, path string, err error) {
	c := classify(err)
	s.logUnexpected(op, path, c.kind, err)
	api.Fail(ctx, v2Status(c), op+" "+path+": "+c.reason)
}

// logUnexpected logs the failures that are not the caller's doing.
func (s *server) logUnexpected(op, path, kind string, err error) {
	if kind == kindIO || kind == kindNoSpace || kind == kindReadOnly {
		s.log.Warn("file plane operation failed", "op", op, "path", path, "error_type", kind, "err", err)
	}
}

// decodeV1 parses a v1 JSON body; on bad JSON it has answered the 422.
func decodeV1(ctx *fasthttp.RequestCtx) *api.Fields {
	f, fe := api.Decode(ctx.PostBody())
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return nil
	}
	return f
}

// decodeV2 parses a v2 JSON body; on bad JSON it has answered the 422.
func decodeV2(ctx *fasthttp.RequestCtx) *api.Fields {
	f, fe := api.Decode(ctx.PostBody())
	if fe != nil {
		api.Invalid(ctx, fe)
		return nil
	}
	return f
}

// queryFields reads the query string as Fields. A repeated key keeps its
// last value.
func queryFields(ctx *fasthttp.RequestCtx) *api.Fields {
	m := map[string]string{}
	ctx.QueryArgs().VisitAll(func(k, v []byte) { m[string(k)] = string(v) })
	return api.FromMap("query", m)
}

// queryErr marks a getter's error as coming from the query string, for the
// v1 422 loc.
func queryErr(fe *api.FieldError) *api.FieldError {
	if fe != nil {
		fe.In = "query"
	}
	return fe
}

// badField builds a body FieldError for a value that parsed but is not allowed.
func badField(name, msg string) *api.FieldError {
	return &api.FieldError{In: "body", Field: name, Msg: msg, Type: "value_error"}
}

func itoa(n int) string { return strconv.Itoa(n) }

// humanBytes renders a limit the way the messages name it: 64 MiB, 1 KiB, 10 bytes.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
