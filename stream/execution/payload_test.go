package execution

import (
	"strings"
	"testing"

	"github.com/aiod/aiod/kernel/jupyter"
)

func TestDecodePayloads(t *testing.T) {
	pages, next := decodePayloads([]byte(`[{"source":"page","data":{"text/plain":"\u001b[31mhelp\u001b[0m","text/html":"<b>h</b>","image/png":"x"},"start":0},` +
		`{"source":"set_next_input","text":"print(1)","replace":false},{"source":"ask_exit","keepkernel":false},{"source":"page","text":"old"}]`))
	if len(pages) != 2 || next != "print(1)" {
		t.Fatalf("pages %d, next %q", len(pages), next)
	}
	if len(pages[0].Data) != 2 || pages[0].Type != jupyter.MsgDisplayData || string(pages[1].Data["text/plain"]) != `"old"` {
		t.Fatalf("pages %+v %+v", pages[0].Data, pages[1].Data)
	}
	c := NewCollector(0)
	c.Add(pages[0])
	c.Add(&Output{Type: jupyter.MsgStream, Name: "stdout", Text: "\x1b[1;31merror\x1b[0m"})
	res := &Result{Outputs: c.Finish()}
	plain := res.Plain()
	if string(plain.Outputs[0].Data["text/plain"]) != `"help"` || plain.Text("stdout") != "error" {
		t.Fatalf("plain page %s, stdout %q", plain.Outputs[0].Data["text/plain"], plain.Text("stdout"))
	}
	if !strings.Contains(string(res.Outputs[0].Data["text/plain"]), `\u001b`) || res.Text("stdout") != "\x1b[1;31merror\x1b[0m" {
		t.Fatal("Plain changed the result it copied")
	}
	if clean := (&Result{Outputs: []*Output{{Type: jupyter.MsgStream, Name: "stdout", Text: "ok"}}}); clean.Plain() != clean {
		t.Fatal("Plain copied a result without escapes")
	}
	for _, raw := range []string{``, `null`, `[]`, `{`, `[{"source":"page","data":{"text/plain":5}}]`} {
		if p, n := decodePayloads([]byte(raw)); len(p) != 0 || n != "" {
			t.Fatalf("payload %q gave %v %q", raw, p, n)
		}
	}
}
