package v1

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/gateway/fsplane"
	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream/execution"
)

// nodeVersions are the values the SDK may send as version.
var nodeVersions = map[string]string{"node20": "20", "node22": "22", "node24": "24", "20": "20", "22": "22", "24": "24"}

// nodeMajor is the installed Node.js major version ("20"), "" when unknown.
func (v *Surface) nodeMajor() string {
	ver := strings.TrimPrefix(v.core.Env.Node.Version, "v")
	major, _, _ := strings.Cut(ver, ".")
	return major
}

// checkVersion validates a version field or query parameter. There is one
// Node.js on the host; a request for another major runs on it all the same
// and the returned note says so.
func (v *Surface) checkVersion(in, raw string) (note string, fe *api.FieldError) {
	if raw == "" {
		return "", nil
	}
	major, ok := nodeVersions[raw]
	if !ok {
		return "", &api.FieldError{In: in, Field: "version", Type: "literal_error",
			Msg: fmt.Sprintf("unknown version %q: use node20, node22, node24 (or 20, 22, 24)", raw)}
	}
	if have := v.nodeMajor(); have != "" && have != major {
		return fmt.Sprintf("version %s was asked for; this host has only Node.js %s, which ran the code", raw, v.core.Env.Node.Version), nil
	}
	return "", nil
}

func queryVersion(ctx *fasthttp.RequestCtx) string { return string(ctx.QueryArgs().Peek("version")) }

// nodeCall is a validated POST /v1/nodejs/execute.
type nodeCall struct {
	execReq
	Stdin *string
	Files map[string]string
	Note  string
}

func (v *Surface) parseNodeExecute(ctx *fasthttp.RequestCtx, f *api.Fields) (nodeCall, *api.FieldError) {
	c := nodeCall{}
	c.Language = "javascript"
	c.Code = f.Code("code")
	stateful := f.Bool("stateful", false)
	c.Stdin = f.OptStr("stdin")
	c.Files = f.StrMap("files")
	version := f.OptStr("version")
	if err := f.Err(); err != nil {
		return c, err
	}
	var fe *api.FieldError
	if version != nil {
		if c.Note, fe = v.checkVersion("body", *version); fe != nil {
			return c, fe
		}
	}
	if c.SessionID, fe = optSessionID(f, "session_id"); fe != nil {
		return c, fe
	}
	if stateful && c.SessionID == "" {
		c.SessionID = jupyter.NewID()
	}
	if c.Timeout, fe = v.timeout(f); fe != nil {
		return c, fe
	}
	if c.Cwd, fe = v.cwd(ctx, f); fe != nil {
		return c, fe
	}
	for name := range c.Files {
		if fe := checkFileName(name); fe != nil {
			return c, fe
		}
	}
	if c.hasStdin() && c.SessionID != "" {
		return c, bodyErr("stdin", "value_error",
			"stdin is supported on one-shot calls only: a session's REPL reads no standard input; drop session_id and stateful, or pass the data in a file")
	}
	return c, nil
}

// checkFileName accepts a relative path that stays inside the execution folder.
func checkFileName(name string) *api.FieldError {
	clean := filepath.Clean(name)
	if name == "" || filepath.IsAbs(name) || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return bodyErr("files", "value_error", "file name %q must be a relative path inside the execution folder", name)
	}
	return nil
}

// writeFiles writes files into dir, creating sub-folders, in view (the
// caller's file system).
func writeFiles(view fsplane.FS, dir string, files map[string]string) error {
	for name, content := range files {
		p := filepath.Join(dir, filepath.Clean(name))
		if err := view.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("write file %q: %w", name, err)
		}
		f, err := view.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err == nil {
			_, err = f.WriteString(content)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return fmt.Errorf("write file %q: %w", name, err)
		}
	}
	return nil
}

// nodeOutput is NodeJsOutput: the nine fields less execution_count.
type nodeOutput struct {
	OutputType string                     `json:"output_type"`
	Name       *string                    `json:"name"`
	Text       *string                    `json:"text"`
	Ename      *string                    `json:"ename"`
	Evalue     *string                    `json:"evalue"`
	Traceback  []string                   `json:"traceback"`
	Data       map[string]json.RawMessage `json:"data"`
	Metadata   json.RawMessage            `json:"metadata"`
}

// nodeExecuteData is NodeJsExecuteResponse.
type nodeExecuteData struct {
	Language       string       `json:"language"` // always "javascript": the SDK's Literal
	Status         string       `json:"status"`
	ExecutionCount *int         `json:"execution_count"`
	Outputs        []nodeOutput `json:"outputs"`
	Code           string       `json:"code"`
	Stdout         string       `json:"stdout"`
	Stderr         string       `json:"stderr"`
	ExitCode       int          `json:"exit_code"`
	SessionID      *string      `json:"session_id"`
	Truncated      bool         `json:"truncated,omitempty"`
	FreshRuntime   bool         `json:"fresh_runtime,omitempty"`
}

func nodeData(res *execution.Result, exitCode int) nodeExecuteData {
	res = res.Plain() // the one-shot node process's text too
	d := nodeExecuteData{
		Language: "javascript", Status: res.Status, ExecutionCount: res.ExecutionCount,
		Outputs: make([]nodeOutput, len(res.Outputs)), Code: res.Code,
		Stdout: res.Text("stdout"), Stderr: res.Text("stderr"), ExitCode: exitCode,
		SessionID: optID(res.SessionID), Truncated: res.Truncated, FreshRuntime: res.Fresh,
	}
	for i, o := range res.Outputs {
		n := o.NineField()
		d.Outputs[i] = nodeOutput{OutputType: n.OutputType, Name: n.Name, Text: n.Text, Ename: n.Ename,
			Evalue: n.Evalue, Traceback: n.Traceback, Data: n.Data, Metadata: n.Metadata}
	}
	return d
}

func (v *Surface) nodeExecute(ctx *fasthttp.RequestCtx) {
	c, ok := parseBody(ctx, func(f *api.Fields) (nodeCall, *api.FieldError) { return v.parseNodeExecute(ctx, f) })
	if !ok {
		return
	}
	if v.core.Env.Node.Error != "" {
		api.Fail(ctx, fasthttp.StatusServiceUnavailable, v.core.Env.Node.Error)
		return
	}
	c.Owner, c.Tenant = call.Owner(ctx), call.Tenant(ctx)
	cleanup, err := v.prepareDir(ctx, &c)
	if err != nil {
		api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: false, Message: err.Error()})
		return
	}
	defer cleanup()
	var (
		res  *execution.Result
		exit int
	)
	if c.hasStdin() {
		if res, exit, ok = v.runNode(ctx, c); !ok {
			return
		}
	} else {
		if res, ok = v.runOr(ctx, c.execReq); !ok {
			return
		}
		exit = res.ExitCode()
	}
	msg := res.Message()
	if c.Note != "" {
		msg += "; " + c.Note
	}
	answer(ctx, res, msg, nodeData(res, exit))
}

// runNode runs a call with stdin in a node process of its own, whose
// standard input is the text. The process is admitted like every runtime
// start (Registry.AdmitProcess): it counts against --max-sessions until the
// call answers and waits its turn at the start gate; a refusal is answered
// as every route answers one.
func (v *Surface) runNode(ctx *fasthttp.RequestCtx, c nodeCall) (*execution.Result, int, bool) {
	started, done, err := v.core.Reg.AdmitProcess(v.core.Ctx(), call.Owner(ctx))
	if err != nil {
		call.MapError(err, c.Call).Write(ctx)
		return nil, 0, false
	}
	defer done()
	res, exit := v.core.RT.RunNode(v.core.Ctx(), c.Code, *c.Stdin, c.Cwd, c.Timeout, v.core.Cfg.OutputBudget, started, c.Tenant)
	return res, exit, true
}

func (c *nodeCall) hasStdin() bool { return c.Stdin != nil && *c.Stdin != "" }

// prepareDir gives a one-shot call with files or stdin and no cwd a fresh
// temporary folder to run in (cleanup removes it), then writes the files
// into the folder the call runs in: its cwd, else its session's. All of it
// happens in the caller's view, with its rights.
func (v *Surface) prepareDir(ctx *fasthttp.RequestCtx, c *nodeCall) (cleanup func(), err error) {
	cleanup = func() {}
	view, err := v.core.ViewOf(ctx)
	if err != nil {
		return cleanup, fmt.Errorf("the caller's file system is not available: %w", err)
	}
	if c.SessionID == "" && c.Cwd == "" && (len(c.Files) > 0 || c.hasStdin()) {
		dir := filepath.Join(v.core.TempDir(), "aiod-node-"+jupyter.NewID())
		if err := view.MkdirAll(dir, 0o700); err != nil {
			return cleanup, fmt.Errorf("create the execution folder: %w", err)
		}
		cleanup = func() { _ = view.RemoveAll(dir) }
		c.Cwd = dir
	}
	if len(c.Files) == 0 {
		return cleanup, nil
	}
	dir := c.Cwd
	if dir == "" {
		dir = v.sessionCwd(c.Tenant, "javascript", c.SessionID)
	}
	if err := writeFiles(view, dir, c.Files); err != nil {
		cleanup()
		return func() {}, err
	}
	return cleanup, nil
}

// sessionCwd is the folder tenant's session works in, as far as v1 knows.
func (v *Surface) sessionCwd(tenant, lang, id string) string {
	if sess := v.core.Reg.Get(tenant, lang, id); sess != nil {
		if d := sess.Cwd(); d != "" {
			return d
		}
	}
	return v.defaultCwd()
}

func (v *Surface) nodeInfo(ctx *fasthttp.RequestCtx) {
	node := v.core.Env.Node
	d := map[string]any{
		"node_version":        strings.TrimPrefix(node.Version, "v"),
		"npm_version":         "",
		"supported_languages": []string{"javascript"},
		"description": fmt.Sprintf("JavaScript on Node.js REPLs: one-shot calls run in a fresh process, sessions keep globals (idle sessions are reclaimed after %d s). Calls with stdin run as a node process of their own.",
			int(v.core.Cfg.NativeIdle/time.Second)),
		"runtime_directory":    nil,
		"global_npm_directory": nil,
		"runtime_packages":     []pkgInfo{},
		"global_packages":      []pkgInfo{},
		"available_versions":   []string{},
		"current_version":      nil,
	}
	if node.Error != "" {
		d["error"] = node.Error
		api.OK(ctx, d)
		return
	}
	d["runtime_directory"] = filepath.Dir(node.Path)
	if major := v.nodeMajor(); major != "" {
		d["available_versions"] = []string{"node" + major}
		d["current_version"] = "node" + major
	}
	var errs []string
	if ver, err := v.toolOutput("npm-version", "npm", "--version"); err == nil {
		d["npm_version"] = ver
	} else {
		errs = append(errs, err.Error())
	}
	if root, err := v.toolOutput("npm-root", "npm", "root", "-g"); err == nil {
		d["global_npm_directory"] = root
	} else {
		errs = append(errs, err.Error())
	}
	if pkgs, err := v.packages("nodejs", v.globalNpmPackages); err == nil {
		d["global_packages"] = pkgs
	} else {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		d["error"] = strings.Join(errs, "; ")
	}
	api.OK(ctx, d)
}
