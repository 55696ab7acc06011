package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
)

// TestV1SDKWalkthrough is the page's SDK walkthrough, each call sent as the
// SDK sends it: file.write_file, jupyter.create_session() with no body,
// jupyter.execute_code twice, file.list_path, file.download_file,
// jupyter.delete_session.
func TestV1SDKWalkthrough(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	dir := t.TempDir()
	csv := dir + "/sales.csv"

	// 1. client.file.write_file(file=..., content=...)
	w := ts.sdkOK(t, "POST", "v1/file/write", map[string]any{"file": csv, "content": "month,revenue,cost\n2026-01,120,80\n2026-02,135,82\n2026-03,150,90\n" +
		"2026-04,142,95\n2026-05,168,99\n2026-06,180,104\n"})
	if w.Body["success"] != true || w.data()["bytes_written"] != 110.0 {
		t.Fatalf("write_file: %s", w.Raw)
	}

	// 2. client.jupyter.create_session(): no arguments, so no body at all.
	c := ts.sdkOK(t, "POST", "v1/jupyter/sessions/create", nil)
	sid, _ := c.data()["session_id"].(string)
	if sid == "" || url.PathEscape(sid) != sid || c.data()["kernel_name"] != "python3" {
		t.Fatalf("create_session: %s", c.Raw)
	}

	first := ts.sdkOK(t, "POST", "v1/jupyter/execute", map[string]any{"session_id": sid, "code": `
import pandas as pd
df = pd.read_csv("` + csv + `")
df["margin"] = df.revenue - df.cost
print(df.margin.describe())
`})
	fo := v1Outs(first.data())
	if len(fo) == 0 {
		t.Fatalf("first execute: no outputs: %s", first.Raw)
	}
	text, _ := fo[0]["text"].(string)
	if !strings.HasPrefix(text, "count     6.000000\nmean     57.500000\nstd      13.546217") {
		t.Fatalf("first.outputs[0].text = %q, want the page's describe()", text)
	}
	if len(fo[0]) != 9 || first.data()["session_id"] != sid || first.data()["execution_count"] != 1.0 {
		t.Fatalf("first execute: want nine-field outputs, the session id and execution_count 1: %s", first.Raw)
	}

	// 3. Plot in the same session, save into the sandbox.
	second := ts.sdkOK(t, "POST", "v1/jupyter/execute", map[string]any{"session_id": sid, "code": `
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
df.plot(x="month", y=["revenue", "cost"], kind="bar", figsize=(6, 3))
plt.tight_layout()
plt.savefig("` + dir + `/plot.png", dpi=120)
`})
	if second.data()["status"] != "ok" || second.Body["success"] != true {
		t.Fatalf("second execute: %s", second.Raw)
	}

	// 4. client.file.list_path(path=...)
	l := ts.sdkOK(t, "POST", "v1/file/list", map[string]any{"path": dir})
	var names []string
	for _, f := range l.data()["files"].([]any) {
		fi := f.(map[string]any)
		names = append(names, fmt.Sprintf("%s:%v", fi["name"], fi["size"] != nil))
	}
	if strings.Join(names, ",") != "plot.png:true,sales.csv:true" {
		t.Fatalf("list_path: %v: %s", names, l.Raw)
	}

	// 5. b"".join(client.file.download_file(path=...)): raw bytes.
	req, _ := http.NewRequest("GET", ts.URL+"/v1/file/download?path="+url.QueryEscape(dir+"/plot.png"), nil)
	req.Header.Set("X-Fern-Language", "Python")
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	png, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	disk, _ := os.ReadFile(ts.hostPath(t, "default", dir+"/plot.png"))
	if resp.StatusCode != 200 || !strings.HasPrefix(string(png), "\x89PNG") || string(png) != string(disk) {
		t.Fatalf("download_file: status %d, %d bytes (file has %d)", resp.StatusCode, len(png), len(disk))
	}

	// 6. client.jupyter.delete_session(session_id=...)
	d := ts.sdkOK(t, "DELETE", "v1/jupyter/sessions/"+sid, nil)
	if d.Body["success"] != true || ts.Registry().Get("default", "python", sid) != nil {
		t.Fatalf("delete_session: %s", d.Raw)
	}
	ts.sdkStatus(t, "DELETE", "v1/jupyter/sessions/"+sid, nil, http.StatusNotFound)
}

// TestV1SDKExamples are the page's one-shot and session-reuse SDK examples.
func TestV1SDKExamples(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{})
	py := ts.sdkOK(t, "POST", "v1/code/execute", map[string]any{"language": "python", "code": "print(sum([1,2,3]))"})
	js := ts.sdkOK(t, "POST", "v1/code/execute", map[string]any{"language": "javascript", "code": "console.log([1,2,3].reduce((a,b)=>a+b))"})
	for _, r := range []v1Reply{py, js} {
		d := r.data()
		if d["stdout"] != "6\n" || d["stderr"] != nil || d["exit_code"] != 0.0 || d["session_id"] != nil || d["status"] != "ok" || r.Body["success"] != true {
			t.Fatalf("one-shot: %s", r.Raw)
		}
	}
	// The page's second sample, field by field (stderr is null when empty).
	want := map[string]any{"code": "print(sum([1,2,3]))", "language": "python", "status": "ok", "execution_count": 1.0, "exit_code": 0.0}
	for k, v := range want {
		if py.data()[k] != v {
			t.Errorf("python one-shot %s = %v, want %v", k, py.data()[k], v)
		}
	}
	if o := v1Outs(py.data()); len(o) != 1 || o[0]["output_type"] != "stream" || o[0]["name"] != "stdout" || o[0]["text"] != "6\n" {
		t.Errorf("python one-shot outputs: %s", py.Raw)
	}

	ts.sdkOK(t, "POST", "v1/code/execute", map[string]any{"language": "python", "code": "x = 21", "session_id": "s1"})
	r := ts.sdkOK(t, "POST", "v1/code/execute", map[string]any{"language": "python", "code": "print(x * 2)", "session_id": "s1"})
	if r.data()["stdout"] != "42\n" || r.data()["session_id"] != "s1" {
		t.Fatalf("python session reuse: %s", r.Raw)
	}
	ts.sdkOK(t, "POST", "v1/nodejs/execute", map[string]any{"code": "globalThis.n = 41", "session_id": "s1"})
	r = ts.sdkOK(t, "POST", "v1/nodejs/execute", map[string]any{"code": "console.log(n + 1)", "session_id": "s1"})
	if r.data()["stdout"] != "42\n" || r.data()["session_id"] != "s1" || r.data()["language"] != "javascript" {
		t.Fatalf("nodejs session reuse: %s", r.Raw)
	}
}
