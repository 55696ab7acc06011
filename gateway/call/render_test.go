package call

import (
	"bytes"
	"strings"
	"testing"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/stream/execution"
)

// TestExecDataAppendJSONIsMarshal: the answer written into one buffer of
// its size (ExecData.AppendJSON, through api.WriteJSON's Appender) is,
// byte for byte, what api.Marshal writes for the same data: every kind of
// output, every optional field on and off, and texts to escape.
func TestExecDataAppendJSONIsMarshal(t *testing.T) {
	count, exit := 3, 2
	text := "line \"one\"\n\ttab \\ <b>&</b> \x1b[1mbold\x1b[0m \u2028 é😀 \xff\x00 end"
	full := &execution.Result{
		ExecutionID: "exec-1", Code: "print('x')\n" + text, Language: "python", SessionID: "s 1", Status: execution.StatusError,
		ExecutionCount: &count, Truncated: true, Fresh: true, Restored: true, Skipped: map[string]string{"b": "why", "a": "how <x>"},
		Replayed: true, NextInput: "next\ncell", ErrorKind: execution.KindException, Warnings: []string{"w1", "w \"2\""}, ExitStatus: &exit,
		Outputs: []*execution.Output{
			{Type: "stream", Name: "stdout", Text: text},
			{Type: "stream", Name: "stderr", Text: "err\n"},
			{Type: "execute_result", ExecutionCount: &count, Data: map[string]json.RawMessage{"text/plain": json.RawMessage(`"3"`), "text/html": json.RawMessage(`"<table></table>"`)}},
			{Type: "display_data", Data: map[string]json.RawMessage{"image/png": json.RawMessage(`"iVBORw0KGgo="`)}, Metadata: json.RawMessage(`{"isolated":true}`)},
			{Type: "error", Ename: "ValueError", Evalue: "bad \"value\"", Traceback: []string{"Traceback", "  line 1"}},
			{Type: "stream", Name: "stdout", Text: strings.Repeat("y", 100000) + "\n"},
		},
	}
	for _, r := range []*execution.Result{
		full,
		{ExecutionID: "e2", Language: "javascript", Status: execution.StatusOK, Outputs: []*execution.Output{}},
		{ExecutionID: "e3", Language: "bash", Status: execution.StatusOK, Outputs: []*execution.Output{{Type: "stream", Name: "stdout", Text: ""}}},
	} {
		for _, d := range []ExecData{V2Data(r), DataOf(r)} {
			want, err := api.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			got, err := d.AppendJSON([]byte("{"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[1:], want) {
				t.Errorf("AppendJSON:\n%.600s\nMarshal:\n%.600s", got[1:], want)
			}
			if d.JSONSize() < len(want) {
				t.Errorf("JSONSize %d under the answer's %d bytes", d.JSONSize(), len(want))
			}
			// And through the envelope: what WriteJSON writes.
			env := api.Envelope{Success: r.Success(), Message: r.Message(), Data: d}
			wantEnv, _ := api.Marshal(env)
			gotEnv, err := api.AppendEnvelope([]byte("{"), env, d)
			if err != nil || !bytes.Equal(append(gotEnv, '}'), wantEnv) {
				t.Errorf("AppendEnvelope: %v\n%.300s\nMarshal:\n%.300s", err, gotEnv, wantEnv)
			}
		}
	}
}
