package call

import "fmt"

// LanguageInfo is what runs one language's calls (an entry of
// /v2/code/info's languages; /v1/code/info says it in its shape).
type LanguageInfo struct {
	Language  string `json:"language"`
	Available bool   `json:"available"`
	Backend   string `json:"backend"`
	Runtime   string `json:"runtime"`
	Version   string `json:"version"`
	Path      string `json:"path"`
	Error     string `json:"error,omitempty"`
}

// LanguageInfos says what runs Python, JavaScript and bash calls now: Python's
// backend is "jupyter" while AIO_JUPYTER_ENDPOINT answers.
func (c *Core) LanguageInfos() []LanguageInfo {
	env := c.Env
	py := LanguageInfo{Language: "python", Backend: c.RT.PythonBackend(), Error: env.BackendError}
	if py.Backend == "jupyter" {
		ri := c.RT.Remote()
		py.Runtime = fmt.Sprintf("remote Jupyter server %s (jupyter_server %s, kernelspec %s)", ri.Endpoint, ri.Version, ri.Kernel)
		py.Version, py.Path, py.Error = "", ri.Endpoint, ""
	} else if env.PythonBackend == "kernel" && env.PythonKernel != nil {
		py.Runtime = fmt.Sprintf("ipykernel %s (kernelspec %s)", env.PythonKernel.IPyKernel, env.PythonKernel.Name)
		py.Version, py.Path = env.PythonKernel.Python, env.PythonKernel.Interpreter
	} else {
		py.Runtime, py.Version, py.Path = "native python REPL", env.Python.Version, env.Python.Path
	}
	py.Available = py.Error == ""
	js := LanguageInfo{Language: "javascript", Backend: "native", Runtime: "node REPL",
		Version: env.Node.Version, Path: env.Node.Path, Error: env.Node.Error}
	js.Available = js.Error == ""
	sh := LanguageInfo{Language: "bash", Backend: "native", Runtime: "bash",
		Version: env.Bash.Version, Path: env.Bash.Path, Error: env.Bash.Error}
	sh.Available = sh.Error == ""
	return []LanguageInfo{py, js, sh}
}
