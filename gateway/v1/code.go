package v1

import (
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/kernel/jupyter"
)

// parseCodeExecute validates POST /v1/code/execute (CodeExecuteRequest).
// A non-empty session_id means stateful; stateful without one gets a new id.
func (v *Surface) parseCodeExecute(ctx *fasthttp.RequestCtx, f *api.Fields) (execReq, *api.FieldError) {
	c := execReq{}
	c.Language = f.Str("language", true)
	c.Code = f.Str("code", true)
	stateful := f.Bool("stateful", false)
	if err := f.Err(); err != nil {
		return c, err
	}
	if c.Language != "python" && c.Language != "javascript" { // the SDK's Language; bash is /v1/shell and /v1/bash
		return c, bodyErr("language", "literal_error", "unsupported language %q: use python or javascript", c.Language)
	}
	var fe *api.FieldError
	if c.SessionID, fe = optSessionID(f, "session_id"); fe != nil {
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

// codeExecuteData is CodeExecuteResponse; execution_count is an extra the
// page's sample carries.
type codeExecuteData struct {
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

func (v *Surface) codeExecute(ctx *fasthttp.RequestCtx) {
	c, ok := parseBody(ctx, func(f *api.Fields) (execReq, *api.FieldError) { return v.parseCodeExecute(ctx, f) })
	if !ok {
		return
	}
	res, ok := v.runOr(ctx, c)
	if !ok {
		return
	}
	d := codeExecuteData{
		Language: res.Language, Status: res.Status, Outputs: make([]any, len(res.Outputs)), Code: res.Code,
		Stdout: nullIfEmpty(res.Text("stdout")), Stderr: nullIfEmpty(res.Text("stderr")),
		ExitCode: res.ExitCode(), Traceback: firstTraceback(res), SessionID: optID(res.SessionID),
		ExecutionCount: res.ExecutionCount, Truncated: res.Truncated, FreshRuntime: res.Fresh,
	}
	for i, o := range res.Outputs {
		d.Outputs[i] = o.Compact()
	}
	answer(ctx, res, "", d)
}

// codeLanguageInfo is CodeLanguageInfo.
type codeLanguageInfo struct {
	Language       string         `json:"language"`
	Description    string         `json:"description"`
	RuntimeVersion *string        `json:"runtime_version"`
	DefaultTimeout int            `json:"default_timeout"`
	MaxTimeout     int            `json:"max_timeout"`
	Details        map[string]any `json:"details"`
}

func (v *Surface) codeInfo(ctx *fasthttp.RequestCtx) {
	cfg := v.core.Cfg
	var out []codeLanguageInfo
	for _, li := range v.core.LanguageInfos() {
		if li.Language == "bash" { // not in the SDK's Language: its shell is /v1/shell and /v1/bash
			continue
		}
		idle := cfg.NativeIdle.Seconds()
		if li.Backend == "kernel" {
			idle = cfg.KernelIdle.Seconds()
		}
		desc := fmt.Sprintf("Python on %s", li.Runtime)
		if li.Language == "javascript" {
			desc = "JavaScript on a Node.js REPL"
		}
		d := codeLanguageInfo{
			Language: li.Language, Description: desc, RuntimeVersion: nullIfEmpty(li.Version),
			DefaultTimeout: int(cfg.DefaultTimeout.Seconds()), MaxTimeout: int(cfg.MaxTimeout.Seconds()),
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
