package call

import "github.com/aiod/aiod/stream/execution"

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
