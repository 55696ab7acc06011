package kernel

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeSpec(t *testing.T, root, name, content string) string {
	t.Helper()
	dir := filepath.Join(root, "kernels", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if content != "" {
		if err := os.WriteFile(filepath.Join(dir, "kernel.json"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestFindSpecs(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	override := writeSpec(t, a, "python3", `{
		"argv": ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
		"display_name": "Override", "language": "python", "interrupt_mode": "message",
		"env": {"GREETING": "hello ${AIOD_TEST_NAME}", "KEEP": "${AIOD_UNSET_VAR}"},
		"metadata": {"debugger": false}}`)
	writeSpec(t, a, "broken", `{"argv": [`)
	writeSpec(t, a, "noargv", `{"argv": [], "language": "python"}`)
	writeSpec(t, a, "badmode", `{"argv": ["x"], "interrupt_mode": "sometimes"}`)
	writeSpec(t, a, "not-a-spec", "")
	writeSpec(t, b, "python3", `{"argv": ["/nowhere/python"], "language": "python"}`)
	other := writeSpec(t, b, "other", `{"argv": ["/bin/other", "{connection_file}", "{resource_dir}"], "language": "R"}`)
	t.Setenv("JUPYTER_PATH", a+string(os.PathListSeparator)+b)
	t.Setenv("JUPYTER_DATA_DIR", t.TempDir())
	t.Setenv("AIOD_TEST_NAME", "world")

	specs, err := FindSpecs()
	byName := map[string]*Spec{}
	for _, s := range specs {
		if byName[s.Name] != nil {
			t.Errorf("spec %s listed twice", s.Name)
		}
		byName[s.Name] = s
	}
	for _, bad := range []string{"broken", "noargv", "badmode"} {
		if byName[bad] != nil {
			t.Errorf("invalid spec %s was not skipped", bad)
		}
		if err == nil || !strings.Contains(err.Error(), filepath.Join(a, "kernels", bad, "kernel.json")) {
			t.Errorf("warnings do not name %s: %v", bad, err)
		}
	}
	if byName["not-a-spec"] != nil || strings.Contains(err.Error(), "not-a-spec") {
		t.Errorf("folder without kernel.json was reported: %v", err)
	}

	py := byName["python3"]
	if py == nil || py.Dir != override {
		t.Fatalf("python3 = %+v, want the one in %s", py, override)
	}
	if py.DisplayName != "Override" || py.Language != "python" || py.InterruptMode != InterruptMessage ||
		string(py.Metadata) != `{"debugger": false}` || !py.IsIPyKernel() || len(py.Raw) == 0 {
		t.Errorf("python3 = %+v", py)
	}
	env := py.environ([]string{"AIOD_TEST_NAME=world"})
	if want := []string{"GREETING=hello world", "KEEP=${AIOD_UNSET_VAR}"}; !reflect.DeepEqual(env, want) {
		t.Errorf("environ = %q, want %q", env, want)
	}

	o := byName["other"]
	if o == nil || o.Dir != other || o.InterruptMode != InterruptSignal || o.IsIPyKernel() {
		t.Fatalf("other = %+v", o)
	}
	if got, want := o.command("/tmp/c.json"), []string{"/bin/other", "/tmp/c.json", other}; !reflect.DeepEqual(got, want) {
		t.Errorf("command = %q, want %q", got, want)
	}

	if s, err := FindSpec("python3"); err != nil || s.Dir != override {
		t.Errorf("FindSpec(python3) = %v, %v", s, err)
	}
	if s, err := DefaultPythonSpec(); err != nil || s.Dir != override {
		t.Errorf("DefaultPythonSpec = %v, %v", s, err)
	}
	if _, err := FindSpec("nope"); !errors.Is(err, ErrNoSpec) {
		t.Errorf("FindSpec(nope) = %v, want ErrNoSpec", err)
	}
}

func TestPickPython(t *testing.T) {
	t.Parallel()
	ipy := &Spec{Name: "py-ipy", Language: "Python", Argv: []string{"python", "-m", "ipykernel_launcher"}}
	plain := &Spec{Name: "a-py", Language: "python", Argv: []string{"python"}}
	r := &Spec{Name: "ir", Language: "R", Argv: []string{"R"}}
	if got := pickPython([]*Spec{plain, r, ipy}); got != ipy {
		t.Errorf("picked %v, want the ipykernel one", got)
	}
	if got := pickPython([]*Spec{r, plain}); got != plain {
		t.Errorf("picked %v, want the python one", got)
	}
	if got := pickPython([]*Spec{r}); got != nil {
		t.Errorf("picked %v, want none", got)
	}
}
