package gateway

// The v1 answers are checked against openapi.json, whose v1 schemas are
// written from the agent_sandbox SDK's models (docs/v1-compat.md): every
// handler test's answer goes through kin-openapi's validator (checkAnswer,
// from the shared helpers). This test checks that the document keeps the
// strictness the SDK needs where pydantic's lax mode would hide a server
// bug: an int field must be an integral JSON number (not "1", not true), a
// str field a JSON string, a required field present and not null, the
// nine-field outputs complete; extra fields are allowed, as in the SDK.

import (
	"strings"
	"testing"
)

// TestV1SchemaChecker: each trap of docs/v1-compat.md is rejected by the document.
// Each case is a minimal pair: a well-formed answer, which must pass, and
// the same answer with one trap put in, which must not; so the rejection
// is the trap's doing.
func TestV1SchemaChecker(t *testing.T) {
	t.Parallel()
	d := openapiDoc(t)
	const nine = `{"output_type":"stream","name":"stdout","text":"a","data":null,"metadata":null,"execution_count":null,"ename":null,"evalue":null,"traceback":null}`
	const jexec = `{"data":{"kernel_name":"python3","status":"ok","code":"1","outputs":[` + nine + `],"execution_count":1}}`
	const nexec = `{"data":{"language":"javascript","status":"ok","code":"1","exit_code":0,"outputs":[{"output_type":"stream","text":"a"}]}}`
	const sandbox = `{"data":"summary","home_dir":"/h","version":"1","detail":{"system":{"os":"l","os_version":"1","arch":"x","user":"u","home_dir":"/h","timezone":"UTC","occupied_ports":["8080"]},"runtime":{"python":[],"nodejs":[]},"utils":[]}}`
	const nsess = `{"data":{"session":{"session_id":"a","cwd":"/","created_at":1.5,"last_used":1,"max_idle_time":1,"age_seconds":0,"state":"IDLE"}}}`
	cases := []struct {
		name, method, path string
		status             int
		good, from, to     string
	}{
		{"outputs null", "POST", "/v1/jupyter/execute", 200, jexec, `"outputs":[` + nine + `]`, `"outputs":null`},
		{"outputs absent", "POST", "/v1/jupyter/execute", 200, jexec, `"outputs":[` + nine + `],`, ``},
		{"text as list", "POST", "/v1/jupyter/execute", 200, jexec, `"text":"a"`, `"text":["a"]`},
		{"traceback as string", "POST", "/v1/jupyter/execute", 200, jexec, `"traceback":null`, `"traceback":"x"`},
		{"eight fields", "POST", "/v1/jupyter/execute", 200, jexec, `"ename":null,`, ``},
		{"execution_count 1.5", "POST", "/v1/jupyter/execute", 200, jexec, `"execution_count":1}`, `"execution_count":1.5}`},
		{"execution_count string", "POST", "/v1/jupyter/execute", 200, jexec, `"execution_count":1}`, `"execution_count":"1"}`},
		{"no output_type", "POST", "/v1/nodejs/execute", 200, nexec, `"output_type":"stream",`, ``},
		{"exit_code null", "POST", "/v1/nodejs/execute", 200, nexec, `"exit_code":0`, `"exit_code":null`},
		{"exit_code bool", "POST", "/v1/nodejs/execute", 200, nexec, `"exit_code":0`, `"exit_code":true`},
		{"language literal", "POST", "/v1/nodejs/execute", 200, nexec, `"language":"javascript"`, `"language":"nodejs"`},
		{"code execute language", "POST", "/v1/code/execute", 200, `{"data":{"language":"python","status":"ok","code":"1"}}`, `"language":"python",`, ``},
		{"info kernel_detection", "GET", "/v1/jupyter/info", 200, `{"data":{"default_kernel":"p","available_kernels":[],"active_sessions":0,"session_timeout_seconds":1,"max_sessions":1,"description":"d","kernel_detection":"k"}}`, `,"kernel_detection":"k"`, ``},
		{"create message", "POST", "/v1/jupyter/sessions/create", 200, `{"data":{"session_id":"a","kernel_name":"p","message":"m"}}`, `,"message":"m"`, ``},
		{"sessions as list", "GET", "/v1/jupyter/sessions", 200, `{"data":{"sessions":{}}}`, `{}`, `[]`},
		{"age_seconds float", "GET", "/v1/jupyter/sessions", 200, `{"data":{"sessions":{"a":{"kernel_name":"p","last_used":1.5,"age_seconds":2}}}}`, `"age_seconds":2`, `"age_seconds":2.5`},
		{"node session missing state", "GET", "/v1/nodejs/sessions/a", 200, nsess, `,"state":"IDLE"`, ``},
		{"file error missing error_type", "POST", "/v1/file/read", 200, `{"success":false,"data":{"path":"/x","operation":"read","message":"m","error_type":"not_found"}}`, `,"error_type":"not_found"`, ``},
		{"file size string", "POST", "/v1/file/list", 200, `{"data":{"path":"/","files":[{"name":"a","path":"/a","is_directory":false,"size":1}]}}`, `"size":1`, `"size":"1"`},
		{"sandbox data object", "GET", "/v1/sandbox", 200, sandbox, `"data":"summary"`, `"data":{}`},
		{"ports as numbers", "GET", "/v1/sandbox", 200, sandbox, `["8080"]`, `[8080]`},
		{"sandbox no utils", "GET", "/v1/sandbox", 200, sandbox, `,"utils":[]`, ``},
		{"422 detail string", "POST", "/v1/code/execute", 422, `{"detail":[{"loc":["body","code",0],"msg":"m","type":"missing"}]}`, `[{"loc":["body","code",0],"msg":"m","type":"missing"}]`, `"bad"`},
		{"422 loc float", "POST", "/v1/code/execute", 422, `{"detail":[{"loc":["body","code",0],"msg":"m","type":"missing"}]}`, `0]`, `0.5]`},
		{"top-level array", "DELETE", "/v1/jupyter/sessions", 200, `{}`, `{}`, `[]`},
		{"extra fields allowed, success a string", "POST", "/v1/jupyter/execute", 200, strings.Replace(jexec, `"data":`, `"extra":1,"success":true,"data":`, 1), `"success":true`, `"success":"yes"`},
	}
	for _, c := range cases {
		bad := strings.Replace(c.good, c.from, c.to, 1)
		if bad == c.good {
			t.Fatalf("%s: the trap %q is not in the good answer", c.name, c.from)
		}
		if err := d.CheckBody(c.method, c.path, c.status, []byte(c.good)); err != nil {
			t.Errorf("%s: openapi.json rejects the well-formed answer %s: %v", c.name, c.good, err)
		}
		if err := d.CheckBody(c.method, c.path, c.status, []byte(bad)); err == nil {
			t.Errorf("%s: openapi.json accepts %s", c.name, bad)
		}
	}
}
