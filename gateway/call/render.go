package call

import (
	"strconv"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/stream/execution"
)

// ExecData is a result as POST /v2/code/execute's data: the v2 contract,
// which MCP's structuredContent, the execution routes and the streams
// carry too.
type ExecData struct {
	Code           string            `json:"code"`
	Language       string            `json:"language"`
	Status         string            `json:"status"`
	ExecutionCount *int              `json:"execution_count"`
	ExitCode       int               `json:"exit_code"`
	Outputs        []any             `json:"outputs"`
	Stdout         string            `json:"stdout"`
	Stderr         string            `json:"stderr"`
	SessionID      *string           `json:"session_id"`
	ExecutionID    string            `json:"execution_id"`
	QueuedMs       int64             `json:"queued_ms,omitempty"` // time spent behind the session's earlier calls
	Truncated      bool              `json:"truncated,omitempty"`
	FreshRuntime   bool              `json:"fresh_runtime,omitempty"`
	Restored       bool              `json:"restored,omitempty"` // the session's saved state was restored into a fresh runtime for this call
	Skipped        map[string]string `json:"skipped,omitempty"`  // with restored: what could not be saved or restored, name -> why
	Replayed       bool              `json:"replayed,omitempty"` // the stored answer of an execution that had finished
	NextInput      *string           `json:"next_input,omitempty"`
	ErrorKind      string            `json:"error_kind,omitempty"`
	Warnings       []string          `json:"warnings,omitempty"`
}

// V2Data renders a result as POST /v2/code/execute's data: stream text
// without ANSI codes (Result.Plain), as every REST answer has it.
func V2Data(r *execution.Result) ExecData { return DataOf(r.Plain()) }

// DataOf renders r as it is: the WebSocket's result keeps the colours of
// its live outputs.
func DataOf(r *execution.Result) ExecData {
	d := ExecData{
		Code: r.Code, Language: r.Language, Status: r.Status, ExecutionCount: r.ExecutionCount,
		ExitCode: r.ExitCode(), Outputs: make([]any, len(r.Outputs)),
		Stdout: r.Text("stdout"), Stderr: r.Text("stderr"),
		Truncated: r.Truncated, FreshRuntime: r.Fresh, Warnings: r.Warnings, ExecutionID: r.ExecutionID,
		QueuedMs: r.Queued.Milliseconds(), Replayed: r.Replayed, ErrorKind: r.ErrorKind,
		Restored: r.Restored, Skipped: r.Skipped,
	}
	if r.NextInput != "" {
		d.NextInput = &r.NextInput
	}
	for i, o := range r.Outputs {
		d.Outputs[i] = o.Compact()
	}
	if r.SessionID != "" {
		d.SessionID = &r.SessionID
	}
	return d
}

// JSONSize is about how long d's JSON is: its texts, with room for the
// rest and a few escapes (api.Appender).
func (d ExecData) JSONSize() int {
	n := 1024 + len(d.Code) + len(d.Stdout) + len(d.Stderr)
	n += n / 32
	for _, o := range d.Outputs {
		if a, ok := o.(api.Appender); ok {
			n += a.JSONSize()
		} else {
			n += 256
		}
	}
	return n
}

// AppendJSON appends d as api.Marshal writes it, its texts escaped
// straight into dst (api.Appender): the answer of a call that printed
// megabytes is one buffer of its size.
func (d ExecData) AppendJSON(dst []byte) ([]byte, error) {
	str := execution.AppendJSONString
	dst = str(append(dst, `{"code":`...), d.Code)
	dst = str(append(dst, `,"language":`...), d.Language)
	dst = str(append(dst, `,"status":`...), d.Status)
	dst = append(dst, `,"execution_count":`...)
	if d.ExecutionCount == nil {
		dst = append(dst, "null"...)
	} else {
		dst = strconv.AppendInt(dst, int64(*d.ExecutionCount), 10)
	}
	dst = strconv.AppendInt(append(dst, `,"exit_code":`...), int64(d.ExitCode), 10)
	dst = append(dst, `,"outputs":`...)
	if d.Outputs == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, o := range d.Outputs {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if a, ok := o.(api.Appender); ok {
				dst, err = a.AppendJSON(dst)
			} else {
				dst, err = appendMarshal(dst, "", o)
			}
			if err != nil {
				return nil, err
			}
		}
		dst = append(dst, ']')
	}
	dst = str(append(dst, `,"stdout":`...), d.Stdout)
	dst = str(append(dst, `,"stderr":`...), d.Stderr)
	dst = append(dst, `,"session_id":`...)
	if d.SessionID == nil {
		dst = append(dst, "null"...)
	} else {
		dst = str(dst, *d.SessionID)
	}
	dst = str(append(dst, `,"execution_id":`...), d.ExecutionID)
	if d.QueuedMs != 0 {
		dst = strconv.AppendInt(append(dst, `,"queued_ms":`...), d.QueuedMs, 10)
	}
	for _, f := range []struct {
		name string
		on   bool
	}{{"truncated", d.Truncated}, {"fresh_runtime", d.FreshRuntime}, {"restored", d.Restored}} {
		if f.on {
			dst = append(append(append(dst, `,"`...), f.name...), `":true`...)
		}
	}
	if len(d.Skipped) > 0 {
		var err error
		if dst, err = appendMarshal(dst, `,"skipped":`, d.Skipped); err != nil {
			return nil, err
		}
	}
	if d.Replayed {
		dst = append(dst, `,"replayed":true`...)
	}
	if d.NextInput != nil {
		dst = str(append(dst, `,"next_input":`...), *d.NextInput)
	}
	if d.ErrorKind != "" {
		dst = str(append(dst, `,"error_kind":`...), d.ErrorKind)
	}
	if len(d.Warnings) > 0 {
		var err error
		if dst, err = appendMarshal(dst, `,"warnings":`, d.Warnings); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

// appendMarshal appends key and v as api.Marshal writes it.
func appendMarshal(dst []byte, key string, v any) ([]byte, error) {
	b, err := api.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(append(dst, key...), b...), nil
}

var _ api.Appender = ExecData{}
