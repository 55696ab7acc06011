package gateway

import (
	"fmt"
	"github.com/aiod/aiod/stream/execution"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/fsplane"
	"github.com/aiod/aiod/kernel/jupyter"
)

// v1NodeVersions are the values the SDK may send as version.
var v1NodeVersions = map[string]string{"node20": "20", "node22": "22", "node24": "24", "20": "20", "22": "22", "24": "24"}

// nodeMajor is the installed Node.js major version ("20"), "" when unknown.
func (v *v1) nodeMajor() string {
	ver := strings.TrimPrefix(v.s.env.Node.Version, "v")
	major, _, _ := strings.Cut(ver, ".")
	return major
}

// checkVersion validates a version field or query parameter. There is one
// Node.js on the host; a request for another major runs on it all the same
// and the returned note says so.
func (v *v1) checkVersion(in, raw string) (note string, fe *api.FieldError) {
	if raw == "" {
		return "", nil
	}
	major, ok := v1NodeVersions[raw]
	if !ok {
		return "", &api.FieldError{In: in, Field: "version", Type: "literal_error",
			Msg: fmt.Sprintf("unknown version %q: use node20, node22, node24 (or 20, 22, 24)", raw)}
	}
	if have := v.nodeMajor(); have != "" && have != major {
		return fmt.Sprintf("version %s was asked for; this host has only Node.js %s, which ran the code", raw, v.s.env.Node.Version), nil
	}
	return "", nil
}

func v1QueryVersion(ctx *fasthttp.RequestCtx) string { return string(ctx.QueryArgs().Peek("version")) }

// v1NodeCall is a validated POST /v1/nodejs/execute.
type v1NodeCall struct {
	v1Call
	Stdin *string
	Files map[string]string
	Note  string
}

func (v *v1) parseNodeExecute(ctx *fasthttp.RequestCtx, f *api.Fields) (v1NodeCall, *api.FieldError) {
	c := v1NodeCall{}
	c.Language = "javascript"
	c.Code = f.Str("code", true)
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
	if c.SessionID, fe = v1SessionID(f, "session_id"); fe != nil {
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
		if fe := v1CheckFileName(name); fe != nil {
			return c, fe
		}
	}
	if c.hasStdin() && c.SessionID != "" {
		return c, v1BodyErr("stdin", "value_error",
			"stdin is supported on one-shot calls only: a session's REPL reads no standard input; drop session_id and stateful, or pass the data in a file")
	}
	return c, nil
}

// checkFileName accepts a relative path that stays inside the execution folder.
func v1CheckFileName(name string) *api.FieldError {
	clean := filepath.Clean(name)
	if name == "" || filepath.IsAbs(name) || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return v1BodyErr("files", "value_error", "file name %q must be a relative path inside the execution folder", name)
	}
	return nil
}

// v1WriteFiles writes files into dir, creating sub-folders, in view (the
// caller's file system).
func v1WriteFiles(view fsplane.FS, dir string, files map[string]string) error {
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

// v1NodeOutput is NodeJsOutput: the nine fields less execution_count.
type v1NodeOutput struct {
	OutputType string                     `json:"output_type"`
	Name       *string                    `json:"name"`
	Text       *string                    `json:"text"`
	Ename      *string                    `json:"ename"`
	Evalue     *string                    `json:"evalue"`
	Traceback  []string                   `json:"traceback"`
	Data       map[string]json.RawMessage `json:"data"`
	Metadata   json.RawMessage            `json:"metadata"`
}

// v1NodeExecuteData is NodeJsExecuteResponse.
type v1NodeExecuteData struct {
	Language       string         `json:"language"` // always "javascript": the SDK's Literal
	Status         string         `json:"status"`
	ExecutionCount *int           `json:"execution_count"`
	Outputs        []v1NodeOutput `json:"outputs"`
	Code           string         `json:"code"`
	Stdout         string         `json:"stdout"`
	Stderr         string         `json:"stderr"`
	ExitCode       int            `json:"exit_code"`
	SessionID      *string        `json:"session_id"`
	Truncated      bool           `json:"truncated,omitempty"`
	FreshRuntime   bool           `json:"fresh_runtime,omitempty"`
}

func v1NodeData(res *execution.Result, exitCode int) v1NodeExecuteData {
	res = res.Plain() // the one-shot node process's text too
	d := v1NodeExecuteData{
		Language: "javascript", Status: res.Status, ExecutionCount: res.ExecutionCount,
		Outputs: make([]v1NodeOutput, len(res.Outputs)), Code: res.Code,
		Stdout: res.Text("stdout"), Stderr: res.Text("stderr"), ExitCode: exitCode,
		SessionID: v1OptID(res.SessionID), Truncated: res.Truncated, FreshRuntime: res.Fresh,
	}
	for i, o := range res.Outputs {
		n := o.NineField()
		d.Outputs[i] = v1NodeOutput{OutputType: n.OutputType, Name: n.Name, Text: n.Text, Ename: n.Ename,
			Evalue: n.Evalue, Traceback: n.Traceback, Data: n.Data, Metadata: n.Metadata}
	}
	return d
}

func (v *v1) nodeExecute(ctx *fasthttp.RequestCtx) {
	c, ok := v1Parse(ctx, func(f *api.Fields) (v1NodeCall, *api.FieldError) { return v.parseNodeExecute(ctx, f) })
	if !ok {
		return
	}
	if v.s.env.Node.Error != "" {
		api.Fail(ctx, fasthttp.StatusServiceUnavailable, v.s.env.Node.Error)
		return
	}
	c.Owner, c.Tenant = ownerOf(ctx), tenantOf(ctx)
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
		if res, ok = v.runOr(ctx, c.v1Call); !ok {
			return
		}
		exit = res.ExitCode()
	}
	msg := res.Message()
	if c.Note != "" {
		msg += "; " + c.Note
	}
	v1Answer(ctx, res, msg, v1NodeData(res, exit))
}

// runNode runs a call with stdin in a node process of its own, whose
// standard input is the text. The process is admitted like every runtime
// start (Registry.AdmitProcess): it counts against --max-sessions until the
// call answers and waits its turn at the start gate; a refusal is answered
// as every route answers one.
func (v *v1) runNode(ctx *fasthttp.RequestCtx, c v1NodeCall) (*execution.Result, int, bool) {
	started, done, err := v.s.reg.AdmitProcess(v.s.reqCtx(), ownerOf(ctx))
	if err != nil {
		runError(err, c.execCall).write(ctx)
		return nil, 0, false
	}
	defer done()
	res, exit := v.s.rt.RunNode(v.s.reqCtx(), c.Code, *c.Stdin, c.Cwd, c.Timeout, v.s.cfg.OutputBudget, started, c.Tenant)
	return res, exit, true
}

func (c *v1NodeCall) hasStdin() bool { return c.Stdin != nil && *c.Stdin != "" }

// prepareDir gives a one-shot call with files or stdin and no cwd a fresh
// temporary folder to run in (cleanup removes it), then writes the files
// into the folder the call runs in: its cwd, else its session's. All of it
// happens in the caller's view, with its rights.
func (v *v1) prepareDir(ctx *fasthttp.RequestCtx, c *v1NodeCall) (cleanup func(), err error) {
	cleanup = func() {}
	view, err := v.s.fsView(ctx)
	if err != nil {
		return cleanup, fmt.Errorf("the caller's file system is not available: %w", err)
	}
	if c.SessionID == "" && c.Cwd == "" && (len(c.Files) > 0 || c.hasStdin()) {
		dir := filepath.Join(v.s.tempDir(), "aiod-node-"+jupyter.NewID())
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
	if err := v1WriteFiles(view, dir, c.Files); err != nil {
		cleanup()
		return func() {}, err
	}
	return cleanup, nil
}

// sessionCwd is the folder tenant's session works in, as far as v1 knows.
func (v *v1) sessionCwd(tenant, lang, id string) string {
	if sess := v.s.reg.Get(tenant, lang, id); sess != nil {
		if d := sess.Cwd(); d != "" {
			return d
		}
	}
	return v.defaultCwd()
}

func (v *v1) nodeInfo(ctx *fasthttp.RequestCtx) {
	node := v.s.env.Node
	d := map[string]any{
		"node_version":        strings.TrimPrefix(node.Version, "v"),
		"npm_version":         "",
		"supported_languages": []string{"javascript"},
		"description": fmt.Sprintf("JavaScript on Node.js REPLs: one-shot calls run in a fresh process, sessions keep globals (idle sessions are reclaimed after %d s). Calls with stdin run as a node process of their own.",
			int(v.s.cfg.NativeIdle/time.Second)),
		"runtime_directory":    nil,
		"global_npm_directory": nil,
		"runtime_packages":     []v1Pkg{},
		"global_packages":      []v1Pkg{},
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
