package gateway

// A strict checker of v1 responses against the agent_sandbox SDK's models,
// written from spec/v1-compat.md. It is stricter than pydantic's lax mode
// where lax mode would hide a server bug: an int field must be an integral
// JSON number (not "1", not true), a str field a JSON string, a bool a JSON
// boolean. Extra fields are allowed at every level, as in the SDK.

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/goccy/go-json"
)

type sKind int

const (
	skAny sKind = iota
	skStr
	skInt
	skFloat
	skBool
	skList
	skDict
	skObj
	skLiteral
	skUnion
)

// sType is one field type.
type sType struct {
	kind   sKind
	elem   *sType    // list and dict elements
	model  *sModel   // objects
	lit    string    // literals
	models []*sModel // unions of models: the value must satisfy one
}

// sField is one model field. Required fields must be present and not null;
// optional ones may be absent or null.
type sField struct {
	name     string
	t        sType
	required bool
}

type sModel struct {
	name   string
	fields []sField
}

var (
	sAny   = sType{kind: skAny}
	sStr   = sType{kind: skStr}
	sInt   = sType{kind: skInt}
	sFloat = sType{kind: skFloat}
	sBool  = sType{kind: skBool}
	// sStrOrInt is a union of str and int (a 422 loc item).
	sStrOrInt = sType{kind: skUnion}
)

func sList(t sType) sType           { return sType{kind: skList, elem: &t} }
func sDict(t sType) sType           { return sType{kind: skDict, elem: &t} }
func sObj(m *sModel) sType          { return sType{kind: skObj, model: m} }
func sLit(s string) sType           { return sType{kind: skLiteral, lit: s} }
func sOneOf(ms ...*sModel) sType    { return sType{kind: skUnion, models: ms} }
func sReq(n string, t sType) sField { return sField{n, t, true} }
func sOpt(n string, t sType) sField { return sField{n, t, false} }
func sModelOf(name string, fs ...sField) *sModel {
	return &sModel{name: name, fields: fs}
}

// envelope is Response_<X>_: every field optional, strictness in data.
func sEnvelope(data sType) *sModel {
	return sModelOf("Response", sOpt("success", sBool), sOpt("message", sStr), sOpt("data", data), sOpt("hint", sStr))
}

// The SDK's models (spec/v1-compat.md §3-§9).
var (
	mCodeExecute = sModelOf("CodeExecuteResponse",
		sReq("language", sStr), sReq("status", sStr), sOpt("outputs", sList(sDict(sAny))), sReq("code", sStr),
		sOpt("stdout", sStr), sOpt("stderr", sStr), sOpt("exit_code", sInt), sOpt("traceback", sList(sStr)),
		sOpt("session_id", sStr))
	mCodeLanguageInfo = sModelOf("CodeLanguageInfo",
		sReq("language", sStr), sReq("description", sStr), sOpt("runtime_version", sStr),
		sOpt("default_timeout", sInt), sOpt("max_timeout", sInt), sOpt("details", sDict(sAny)))
	mCodeInfo = sModelOf("CodeInfoResponse", sReq("languages", sList(sObj(mCodeLanguageInfo))))

	mJupyterOutput = sModelOf("JupyterOutput",
		sReq("output_type", sStr), sOpt("name", sStr), sOpt("text", sStr), sOpt("data", sDict(sAny)),
		sOpt("metadata", sDict(sAny)), sOpt("execution_count", sInt), sOpt("ename", sStr), sOpt("evalue", sStr),
		sOpt("traceback", sList(sStr)))
	mJupyterExecute = sModelOf("JupyterExecuteResponse",
		sReq("kernel_name", sStr), sOpt("session_id", sStr), sReq("status", sStr), sOpt("execution_count", sInt),
		sReq("outputs", sList(sObj(mJupyterOutput))), sReq("code", sStr), sOpt("msg_id", sStr))
	mJupyterInfo = sModelOf("JupyterInfoResponse",
		sReq("default_kernel", sStr), sReq("available_kernels", sList(sStr)), sReq("active_sessions", sInt),
		sReq("session_timeout_seconds", sInt), sReq("max_sessions", sInt), sReq("description", sStr),
		sReq("kernel_detection", sStr))
	mSessionInfo    = sModelOf("SessionInfo", sReq("kernel_name", sStr), sReq("last_used", sFloat), sReq("age_seconds", sInt))
	mActiveSessions = sModelOf("ActiveSessionsResult", sReq("sessions", sDict(sObj(mSessionInfo))))
	mJupyterCreate  = sModelOf("JupyterCreateSessionResponse", sReq("session_id", sStr), sReq("kernel_name", sStr), sReq("message", sStr))

	mNodeOutput = sModelOf("NodeJsOutput",
		sReq("output_type", sStr), sOpt("name", sStr), sOpt("text", sStr), sOpt("ename", sStr), sOpt("evalue", sStr),
		sOpt("traceback", sList(sStr)), sOpt("data", sDict(sAny)), sOpt("metadata", sDict(sAny)))
	mNodeExecute = sModelOf("NodeJsExecuteResponse",
		sOpt("language", sLit("javascript")), sReq("status", sStr), sOpt("execution_count", sInt),
		sOpt("outputs", sList(sObj(mNodeOutput))), sReq("code", sStr), sOpt("stdout", sStr), sOpt("stderr", sStr),
		sReq("exit_code", sInt), sOpt("session_id", sStr))
	mNodePackage = sModelOf("NodeJsPackageInfo", sReq("name", sStr), sReq("version", sStr))
	mNodeInfo    = sModelOf("NodeJsRuntimeInfo",
		sReq("node_version", sStr), sReq("npm_version", sStr), sReq("supported_languages", sList(sStr)),
		sReq("description", sStr), sOpt("runtime_directory", sStr), sOpt("global_npm_directory", sStr),
		sOpt("runtime_packages", sList(sObj(mNodePackage))), sOpt("global_packages", sList(sObj(mNodePackage))),
		sOpt("error", sStr), sOpt("available_versions", sList(sStr)), sOpt("current_version", sStr))
	mNodeSessionInfo = sModelOf("NodeJsSessionInfo",
		sReq("session_id", sStr), sReq("cwd", sStr), sReq("created_at", sFloat), sReq("last_used", sFloat),
		sReq("max_idle_time", sInt), sReq("age_seconds", sInt), sReq("state", sStr))
	mNodeCreate = sModelOf("NodeJsCreateSessionResponse",
		sReq("session_id", sStr), sReq("created", sBool), sOpt("message", sStr), sOpt("session", sObj(mNodeSessionInfo)))
	mNodeList   = sModelOf("NodeJsSessionListResponse", sOpt("sessions", sDict(sObj(mNodeSessionInfo))))
	mNodeGet    = sModelOf("NodeJsSessionResponse", sReq("session", sObj(mNodeSessionInfo)))
	mNodeUpdate = sModelOf("NodeJsUpdateSessionResponse", sReq("updated", sBool), sReq("session", sObj(mNodeSessionInfo)))
	mNodeDelete = sModelOf("NodeJsDeleteSessionResponse", sReq("deleted", sBool))

	mToolSpec      = sModelOf("ToolSpec", sOpt("ver", sStr), sOpt("bin", sStr), sOpt("alias", sList(sStr)))
	mAvailableTool = sModelOf("AvailableTool", sReq("name", sStr), sOpt("description", sStr))
	mToolCategory  = sModelOf("ToolCategory", sReq("category", sStr), sReq("tools", sList(sObj(mAvailableTool))))
	mSystemEnv     = sModelOf("SystemEnv",
		sReq("os", sStr), sReq("os_version", sStr), sReq("arch", sStr), sReq("user", sStr), sReq("home_dir", sStr),
		sReq("timezone", sStr), sOpt("workspace", sStr), sReq("occupied_ports", sList(sStr)))
	mRuntimeEnv    = sModelOf("RuntimeEnv", sReq("python", sList(sObj(mToolSpec))), sReq("nodejs", sList(sObj(mToolSpec))))
	mSandboxDetail = sModelOf("SandboxDetail", sReq("system", sObj(mSystemEnv)), sReq("runtime", sObj(mRuntimeEnv)),
		sReq("utils", sList(sObj(mToolCategory))))
	// SandboxResponse is flat: home_dir, version and detail beside the envelope keys.
	mSandbox = sModelOf("SandboxResponse",
		sOpt("success", sBool), sOpt("message", sStr), sOpt("data", sStr), sOpt("hint", sStr),
		sReq("home_dir", sStr), sOpt("workspace", sStr), sReq("version", sStr), sReq("detail", sObj(mSandboxDetail)))

	mValidationError = sModelOf("ValidationError",
		sReq("loc", sList(sStrOrInt)), sReq("msg", sStr), sReq("type", sStr))
	mHTTPValidationError = sModelOf("HTTPValidationError", sOpt("detail", sList(sObj(mValidationError))))

	mFileOperationError = sModelOf("FileOperationError",
		sReq("path", sStr), sReq("operation", sStr), sReq("message", sStr), sReq("error_type", sStr),
		sOpt("retryable", sBool), sOpt("errno", sInt), sOpt("errno_name", sStr), sOpt("exception_type", sStr))
	mFileRead  = sModelOf("FileReadResult", sReq("content", sStr), sReq("file", sStr))
	mFileWrite = sModelOf("FileWriteResult", sReq("file", sStr), sOpt("bytes_written", sInt))
	mFileInfo  = sModelOf("FileInfo",
		sReq("name", sStr), sReq("path", sStr), sReq("is_directory", sBool), sOpt("size", sInt),
		sOpt("modified_time", sStr), sOpt("permissions", sStr), sOpt("extension", sStr))
	mFileList = sModelOf("FileListResult",
		sReq("path", sStr), sOpt("files", sList(sObj(mFileInfo))), sOpt("total_count", sInt),
		sOpt("directory_count", sInt), sOpt("file_count", sInt))
)

// The route models: the body of each v1 answer.
var (
	rCodeExecute     = sEnvelope(sObj(mCodeExecute))
	rCodeInfo        = sEnvelope(sObj(mCodeInfo))
	rJupyterExecute  = sEnvelope(sObj(mJupyterExecute))
	rJupyterInfo     = sEnvelope(sObj(mJupyterInfo))
	rJupyterSessions = sEnvelope(sObj(mActiveSessions))
	rJupyterCreate   = sEnvelope(sObj(mJupyterCreate))
	rGeneric         = sEnvelope(sAny)
	rNodeExecute     = sEnvelope(sObj(mNodeExecute))
	rNodeInfo        = sEnvelope(sObj(mNodeInfo))
	rNodeCreate      = sEnvelope(sObj(mNodeCreate))
	rNodeList        = sEnvelope(sObj(mNodeList))
	rNodeGet         = sEnvelope(sObj(mNodeGet))
	rNodeUpdate      = sEnvelope(sObj(mNodeUpdate))
	rNodeDelete      = sEnvelope(sObj(mNodeDelete))
	rPackages        = sEnvelope(sList(sObj(mNodePackage)))
	rFileRead        = sEnvelope(sOneOf(mFileRead, mFileOperationError))
	rFileWrite       = sEnvelope(sOneOf(mFileWrite, mFileOperationError))
	rFileList        = sEnvelope(sOneOf(mFileList, mFileOperationError))
)

// checkSchema returns every way v fails model m; none means the SDK parses it.
func schemaErrors(v any, m *sModel) []string {
	var errs []string
	schemaObj(v, m, "$", &errs)
	sort.Strings(errs)
	return errs
}

func schemaObj(v any, m *sModel, path string, errs *[]string) {
	o, ok := v.(map[string]any)
	if !ok {
		*errs = append(*errs, fmt.Sprintf("%s: %s must be an object, got %s", path, m.name, schemaKind(v)))
		return
	}
	for _, f := range m.fields {
		fv, present := o[f.name]
		p := path + "." + f.name
		if !present || fv == nil {
			if f.required {
				what := "missing"
				if present {
					what = "null"
				}
				*errs = append(*errs, fmt.Sprintf("%s: required field of %s is %s", p, m.name, what))
			}
			continue
		}
		schemaValue(fv, f.t, p, errs)
	}
}

func schemaValue(v any, t sType, path string, errs *[]string) {
	bad := func(want string) {
		*errs = append(*errs, fmt.Sprintf("%s: want %s, got %s", path, want, schemaKind(v)))
	}
	switch t.kind {
	case skAny:
	case skStr:
		if _, ok := v.(string); !ok {
			bad("a string")
		}
	case skInt:
		n, ok := v.(float64)
		if !ok || n != math.Trunc(n) {
			bad("an integer")
		}
	case skFloat:
		if _, ok := v.(float64); !ok {
			bad("a number")
		}
	case skBool:
		if _, ok := v.(bool); !ok {
			bad("a boolean")
		}
	case skLiteral:
		if s, ok := v.(string); !ok || s != t.lit {
			bad(fmt.Sprintf("exactly %q", t.lit))
		}
	case skList:
		l, ok := v.([]any)
		if !ok {
			bad("a list")
			return
		}
		for i, e := range l {
			schemaValue(e, *t.elem, fmt.Sprintf("%s[%d]", path, i), errs)
		}
	case skDict:
		d, ok := v.(map[string]any)
		if !ok {
			bad("an object (dict)")
			return
		}
		for k, e := range d {
			schemaValue(e, *t.elem, fmt.Sprintf("%s[%q]", path, k), errs)
		}
	case skObj:
		schemaObj(v, t.model, path, errs)
	case skUnion:
		if t.models == nil { // str | int
			switch n := v.(type) {
			case string:
			case float64:
				if n != math.Trunc(n) {
					bad("a string or an integer")
				}
			default:
				bad("a string or an integer")
			}
			return
		}
		var all []string
		for _, m := range t.models {
			var e []string
			schemaObj(v, m, path, &e)
			if len(e) == 0 {
				return
			}
			all = append(all, e...)
		}
		*errs = append(*errs, fmt.Sprintf("%s: matches no member of the union: %s", path, strings.Join(all, "; ")))
	}
}

func schemaKind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case float64:
		return fmt.Sprintf("the number %v", x)
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// mustSchema decodes raw and fails the test unless it satisfies m.
func mustSchema(t testing.TB, what string, raw []byte, m *sModel) map[string]any {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: body is not JSON (%v): %q", what, err, raw)
	}
	if errs := schemaErrors(v, m); len(errs) > 0 {
		t.Fatalf("%s: the SDK's %s would reject it:\n  %s\nbody: %s", what, m.name, strings.Join(errs, "\n  "), raw)
	}
	out, _ := v.(map[string]any)
	return out
}

// TestV1SchemaChecker checks the checker: each trap of spec §11 is caught.
func TestV1SchemaChecker(t *testing.T) {
	bad := []struct {
		name string
		m    *sModel
		body string
		want string
	}{
		{"outputs null", rJupyterExecute, `{"data":{"kernel_name":"python3","status":"ok","code":"1","outputs":null}}`, "outputs: required field of JupyterExecuteResponse is null"},
		{"outputs absent", rJupyterExecute, `{"data":{"kernel_name":"python3","status":"ok","code":"1"}}`, "is missing"},
		{"text as list", rJupyterExecute, `{"data":{"kernel_name":"k","status":"ok","code":"1","outputs":[{"output_type":"stream","text":["a"]}]}}`, "text: want a string, got a list"},
		{"traceback as string", rJupyterExecute, `{"data":{"kernel_name":"k","status":"ok","code":"1","outputs":[{"output_type":"error","traceback":"x"}]}}`, "traceback: want a list"},
		{"execution_count 1.5", rJupyterExecute, `{"data":{"kernel_name":"k","status":"ok","code":"1","outputs":[],"execution_count":1.5}}`, "want an integer"},
		{"no output_type", rNodeExecute, `{"data":{"status":"ok","code":"1","exit_code":0,"outputs":[{"text":"a"}]}}`, "output_type: required"},
		{"exit_code null", rNodeExecute, `{"data":{"status":"timeout","code":"1","exit_code":null}}`, "exit_code: required field of NodeJsExecuteResponse is null"},
		{"language literal", rNodeExecute, `{"data":{"language":"nodejs","status":"ok","code":"1","exit_code":0}}`, `exactly "javascript"`},
		{"code execute language", rCodeExecute, `{"data":{"status":"ok","code":"1"}}`, "language: required"},
		{"info kernel_detection", rJupyterInfo, `{"data":{"default_kernel":"p","available_kernels":[],"active_sessions":0,"session_timeout_seconds":1,"max_sessions":1,"description":"d"}}`, "kernel_detection: required"},
		{"create message", rJupyterCreate, `{"data":{"session_id":"a","kernel_name":"p"}}`, "message: required"},
		{"sessions as list", rJupyterSessions, `{"data":{"sessions":[]}}`, "want an object (dict), got a list"},
		{"age_seconds float", rJupyterSessions, `{"data":{"sessions":{"a":{"kernel_name":"p","last_used":1.5,"age_seconds":2.5}}}}`, "age_seconds: want an integer"},
		{"node session missing state", rNodeGet, `{"data":{"session":{"session_id":"a","cwd":"/","created_at":1,"last_used":1,"max_idle_time":1,"age_seconds":0}}}`, "state: required"},
		{"file error missing error_type", rFileRead, `{"data":{"path":"/x","operation":"read","message":"m"}}`, "matches no member"},
		{"file size string", rFileList, `{"data":{"path":"/","files":[{"name":"a","path":"/a","is_directory":false,"size":"1"}]}}`, "matches no member"},
		{"sandbox data object", mSandbox, `{"data":{},"home_dir":"/h","version":"1","detail":{"system":{"os":"l","os_version":"1","arch":"x","user":"u","home_dir":"/h","timezone":"UTC","occupied_ports":[]},"runtime":{"python":[],"nodejs":[]},"utils":[]}}`, "data: want a string"},
		{"ports as numbers", mSandbox, `{"home_dir":"/h","version":"1","detail":{"system":{"os":"l","os_version":"1","arch":"x","user":"u","home_dir":"/h","timezone":"UTC","occupied_ports":[8080]},"runtime":{"python":[],"nodejs":[]},"utils":[]}}`, "occupied_ports[0]: want a string"},
		{"sandbox no utils", mSandbox, `{"home_dir":"/h","version":"1","detail":{"system":{"os":"l","os_version":"1","arch":"x","user":"u","home_dir":"/h","timezone":"UTC","occupied_ports":[]},"runtime":{"python":[],"nodejs":[]}}}`, "utils: required"},
		{"422 detail string", mHTTPValidationError, `{"detail":"bad"}`, "detail: want a list"},
		{"top-level array", rGeneric, `[]`, "must be an object"},
	}
	for _, c := range bad {
		var v any
		if err := json.Unmarshal([]byte(c.body), &v); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		errs := schemaErrors(v, c.m)
		if !strings.Contains(strings.Join(errs, "\n"), c.want) {
			t.Errorf("%s: checker said %q, want a complaint containing %q", c.name, errs, c.want)
		}
	}
	good := []struct {
		m    *sModel
		body string
	}{
		{rGeneric, `{}`},
		{rJupyterExecute, `{"success":true,"data":{"kernel_name":"k","status":"ok","code":"1","outputs":[],"execution_count":1.0,"extra":1}}`},
		{mHTTPValidationError, `{"detail":[{"loc":["body","code",0],"msg":"m","type":"missing"}]}`},
		{rFileRead, `{"success":false,"data":{"path":"/x","operation":"read","message":"m","error_type":"not_found"}}`},
	}
	for _, c := range good {
		var v any
		_ = json.Unmarshal([]byte(c.body), &v)
		if errs := schemaErrors(v, c.m); len(errs) > 0 {
			t.Errorf("%s rejected %s: %v", c.m.name, c.body, errs)
		}
	}
}
