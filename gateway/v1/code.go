package gateway

import (
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/kernel/jupyter"
)

// parseCodeExecute validates POST /v1/code/execute (CodeExecuteRequest).
// A non-empty session_id means stateful; stateful without one gets a new id.
func (v *v1) parseCodeExecute(ctx *fasthttp.RequestCtx, f *api.Fields) (v1Call, *api.FieldError) {
	c := v1Call{}
	c.Language = f.Str("language", true)
	c.Code = f.Str("code", true)
	stateful := f.Bool("stateful", false)
	if err := f.Err(); err != nil {
		return c, err
	}
	if !codeLanguages[c.Language] {
		return c, v1BodyErr("language", "literal_error", "unsupported language %q: use python or javascript", c.Language)
	}
	var fe *api.FieldError
	if c.SessionID, fe = v1SessionID(f, "session_id"); fe != nil {
		return c, fe
	}
	if stateful && c.SessionID == "" {
		c.SessionID = jupyter.NewID()
	}
	if c.Timeout, fe = v.timeout(f); fe != nil {
		return c, fe
	}
	c.Cwd, fe = v.cwd(ctx, f)
	return c, fe
}

// v1CodeExecuteData is CodeExecuteResponse; execution_count is an extra the
// page's sample carries.
type v1CodeExecuteData struct {
	Language       string   `json:"language"`
	Status         string   `json:"status"`
	Outputs        []any    `json:"outputs"`
	Code           string   `json:"code"`
	Stdout         *string  `json:"stdout"`
	Stderr         *string  `json:"stderr"`
	ExitCode       int      `json:"exit_code"`
	Traceback      []string `json:"traceback"`
	SessionID      *string  `json:"session_id"`
	ExecutionCount *int     `json:"execution_count"`
	Truncated      bool     `json:"truncated,omitempty"`
	FreshRuntime   bool     `json:"fresh_runtime,omitempty"`
}

func (v *v1) codeExecute(ctx *fasthttp.RequestCtx) {
	c, ok := v1Parse(ctx, func(f *api.Fields) (v1Call, *api.FieldError) { return v.parseCodeExecute(ctx, f) })
	if !ok {
		return
	}
	res, ok := v.runOr(ctx, c)
	if !ok {
		return
	}
	d := v1CodeExecuteData{
		Language: res.Language, Status: res.Status, Outputs: make([]any, len(res.Outputs)), Code: res.Code,
		Stdout: v1NullIfEmpty(res.Text("stdout")), Stderr: v1NullIfEmpty(res.Text("stderr")),
		ExitCode: res.ExitCode(), Traceback: v1Traceback(res), SessionID: v1OptID(res.SessionID),
		ExecutionCount: res.ExecutionCount, Truncated: res.Truncated, FreshRuntime: res.Fresh,
	}
	for i, o := range res.Outputs {
		d.Outputs[i] = o.Compact()
	}
	v1Answer(ctx, res, "", d)
}

// v1CodeLanguageInfo is CodeLanguageInfo.
type v1CodeLanguageInfo struct {
	Language       string         `json:"language"`
	Description    string         `json:"description"`
	RuntimeVersion *string        `json:"runtime_version"`
	DefaultTimeout int            `json:"default_timeout"`
	MaxTimeout     int            `json:"max_timeout"`
	Details        map[string]any `json:"details"`
}

func (v *v1) codeInfo(ctx *fasthttp.RequestCtx) {
	l := v.s.limits()
	var out []v1CodeLanguageInfo
	for _, li := range v.s.languages() {
		idle := l.NativeIdleSeconds
		if li.Backend == "kernel" {
			idle = l.KernelIdleSeconds
		}
		desc := fmt.Sprintf("Python on %s", li.Runtime)
		if li.Language == "javascript" {
			desc = "JavaScript on a Node.js REPL"
		}
		d := v1CodeLanguageInfo{
			Language: li.Language, Description: desc, RuntimeVersion: v1NullIfEmpty(li.Version),
			DefaultTimeout: int(l.DefaultTimeout), MaxTimeout: int(l.MaxTimeout),
			Details: map[string]any{
				"available": li.Available, "backend": li.Backend, "runtime": li.Runtime, "path": li.Path,
				"session_idle_seconds": int(idle), "stateful": "pass session_id (or stateful: true) to keep state",
			},
		}
		if li.Error != "" {
			d.Details["error"] = li.Error
		}
		out = append(out, d)
	}
	api.OK(ctx, map[string]any{"languages": out})
}
