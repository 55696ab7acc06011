package v2

import (
	"bufio"
	"bytes"
	"errors"
	"strconv"

	"time"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/stream/execution"
)

// Streaming to REST clients: an execution's entries as Server-Sent Events
// or as NDJSON, from a resume point, live until its result.
//
//	SSE:    id: SEQ / event: output / data: {"type":"output","execution_id","seq","output"}
//	        event: status / data: {"type":"status","execution_id","state"}
//	        event: result / data: {"type":"result"} and the execute route's answer (envelope)
//	        event: error  / data: {"type":"error","status","message"} (could not run; or a slow reader, with resume_after)
//	        ": keepalive" comments every 15 s
//	NDJSON: one such JSON object per line, with "type"; {"type":"keepalive"} every 15 s

// keepalive is how often an idle stream sends something.
const keepalive = 15 * time.Second

type streamFormat int

const (
	noStream streamFormat = iota
	sseFormat
	ndjsonFormat
)

// streamFormatOf reads the Accept header; dflt makes SSE the answer when
// it asks for neither (the events route always streams).
func streamFormatOf(ctx *fasthttp.RequestCtx, dflt bool) streamFormat {
	accept := ctx.Request.Header.Peek("Accept")
	switch {
	case bytes.Contains(accept, []byte("text/event-stream")):
		return sseFormat
	case bytes.Contains(accept, []byte("application/x-ndjson")):
		return ndjsonFormat
	case dflt:
		return sseFormat
	}
	return noStream
}

// wireEntry renders one entry as the JSON object both streams carry, and
// its SSE event name. ok is false for an
// entry with nothing to say.
func wireEntry(e execution.Entry, executionID string) (event string, b []byte, ok bool) {
	var v any
	switch {
	case e.Err != nil:
		ce := call.ErrorOf(e.Err)
		m := map[string]any{"type": "error", "execution_id": executionID, "status": ce.Status, "message": ce.Msg}
		if ce.Kind != "" {
			m["error_kind"] = ce.Kind
		}
		if ce.Retry > 0 {
			m["retry_after"] = ce.Retry
		}
		event, v = "error", m
	case e.Event.Result != nil:
		// {"type":"result"} and the execute route's answer, written into
		// one buffer of its size (api.Appender).
		r := e.Event.Result
		d := call.V2Data(r)
		env := api.Envelope{Success: r.Success(), Message: r.Message()}
		b, err := api.AppendEnvelope(append(make([]byte, 0, 64+len(env.Message)+d.JSONSize()), `{"type":"result",`...), env, d)
		return "result", append(b, '}'), err == nil
	case e.Event.Out != nil:
		// Written by hand around the output: a stream output of 1 MB is
		// copied once, where marshalling a wrapper copied and scanned it
		// twice more.
		id, _ := api.Marshal(executionID)
		b := append(append([]byte(`{"type":"output","execution_id":`), id...), `,"seq":`...)
		b = append(strconv.AppendInt(b, int64(e.Seq), 10), `,"output":`...)
		b, err := e.Event.Out.AppendCompactJSON(b, 1)
		if err != nil {
			return "", nil, false
		}
		return "output", append(b, '}'), true
	case e.Event.State != "":
		event = "status"
		v = map[string]any{"type": "status", "execution_id": executionID, "state": e.Event.State}
	default:
		return "", nil, false
	}
	b, err := api.Marshal(v)
	return event, b, err == nil
}

// pullBatch is the most output bytes a stream takes from its execution's
// log at a time: all it holds of its own while a slow client reads.
const pullBatch = 1 << 20

// streamExecution answers ctx with rec's entries after output seq `after`
// in format f, live until the result. The stream does not own the
// execution: a client that goes away stops only its stream. It keeps no
// queue: it pulls what it has not written from the execution's log, a
// batch at a time (execution.Record.Pull), and a reader that falls behind
// what the log holds (half of --output-budget) is told where to resume. An
// `after` whose outputs were dropped answers 410 before any byte is
// streamed.
func (s *Surface) streamExecution(ctx *fasthttp.RequestCtx, rec *execution.Record, after int, f streamFormat) {
	wake := make(chan struct{}, 1)
	detach, err := rec.Follow(after, func(execution.Entry) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	var gone *execution.GoneError
	switch {
	case errors.As(err, &gone):
		api.Fail(ctx, fasthttp.StatusGone, gone.Error())
		return
	case err != nil:
		// Not followed: nothing to stream, and no detach to call.
		api.Fail(ctx, fasthttp.StatusServiceUnavailable, err.Error())
		return
	}
	if f == ndjsonFormat {
		ctx.SetContentType("application/x-ndjson")
	} else {
		ctx.SetContentType("text/event-stream")
	}
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no") // proxies: do not hold the stream back
	ctx.Response.Header.Set("X-Execution-Id", rec.ID)
	base := s.core.Ctx()
	id := rec.ID
	wt, conn := s.core.Cfg.StreamWrite, ctx.Conn()
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer detach()
		tick := time.NewTicker(keepalive)
		defer tick.Stop()
		cur := execution.NewCursor(after)
		defer rec.Track(&cur)()
		for {
			items, next, final, behind := rec.Pull(cur, pullBatch)
			api.Arm(conn, wt)
			for _, e := range items {
				event, b, ok := wireEntry(e, id)
				if !ok {
					continue
				}
				if writeStreamEvent(w, f, event, e, b) != nil {
					return // gone: the rest of the batch is not encoded for nobody
				}
			}
			cur = next
			if final {
				_ = api.Flush(conn, w, wt)
				return
			}
			if behind != nil {
				b, _ := api.Marshal(map[string]any{"type": "error", "execution_id": id, "status": fasthttp.StatusServiceUnavailable,
					"message": "slow reader: the execution's log no longer holds the outputs after seq " + strconv.Itoa(cur.Seq) +
						" (it keeps the last half of --output-budget in bytes); resume with after=" + strconv.Itoa(behind.FirstSeq-1) +
						" to read from the oldest it holds, or fetch the result", "resume_after": behind.FirstSeq - 1, "last_seq": cur.Seq})
				_ = writeStreamEvent(w, f, "error", execution.Entry{}, b)
				_ = api.Flush(conn, w, wt)
				return
			}
			if api.Flush(conn, w, wt) != nil {
				return
			}
			if len(items) > 0 {
				continue // more may wait in the log
			}
			select {
			case <-wake:
			case <-tick.C:
				if f == ndjsonFormat {
					_, _ = w.WriteString(`{"type":"keepalive"}` + "\n")
				} else {
					_, _ = w.WriteString(": keepalive\n\n")
				}
				if api.Flush(conn, w, wt) != nil {
					return
				}
			case <-base.Done():
				return
			}
		}
	})
}

// writeStreamEvent writes one event: an SSE event (with id: SEQ for
// outputs), or an NDJSON line. Its error is the connection's, once a write
// failed (bufio.Writer keeps the first error): the client is gone.
func writeStreamEvent(w *bufio.Writer, f streamFormat, event string, e execution.Entry, data []byte) error {
	if f == ndjsonFormat {
		writePieces(w, data)
		return w.WriteByte('\n')
	}
	if event == "output" {
		_, _ = w.WriteString("id: " + strconv.Itoa(e.Seq) + "\n")
	}
	_, _ = w.WriteString("event: " + event + "\ndata: ")
	writePieces(w, data)
	_, err := w.WriteString("\n\n")
	return err
}

// writePieces writes b in pieces of at most 32 KiB: fasthttp hands a
// streamed answer to the connection through a pipe that copies each write
// into a pooled buffer and queues a few of them, so a 1 MiB write would
// leave megabyte buffers queued (and pooled) behind a client that reads
// slowly.
func writePieces(w *bufio.Writer, b []byte) {
	const piece = 32 << 10
	for len(b) > 0 {
		n := min(len(b), piece)
		if _, err := w.Write(b[:n]); err != nil {
			return
		}
		b = b[n:]
	}
}
