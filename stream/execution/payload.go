package execution

import (
	"bytes"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
)

// replyPayload is one entry of an execute_reply's payload list. IPython
// sends "page" (help: len?, %pinfo, %magic), "set_next_input" (%load,
// %recall), "edit_magic" and "ask_exit"; only the first two reach callers.
type replyPayload struct {
	Source string                     `json:"source"`
	Data   map[string]json.RawMessage `json:"data"` // page
	Text   *string                    `json:"text"` // set_next_input; page before IPython 3
}

// decodePayloads turns the pager payloads of an execute_reply into
// display_data outputs (text/plain, and text/html when given), and returns
// the text of the last set_next_input payload. A payload that does not
// parse is ignored: the reply itself still counts.
func decodePayloads(raw json.RawMessage) (pages []*Output, nextInput string) {
	if len(raw) < 3 { // absent, null or []
		return nil, ""
	}
	var ps []replyPayload
	if json.Unmarshal(raw, &ps) != nil {
		return nil, ""
	}
	for _, p := range ps {
		switch p.Source {
		case "page":
			data := map[string]json.RawMessage{}
			for _, mime := range []string{"text/plain", "text/html"} {
				if v, ok := p.Data[mime]; ok && isJSONString(v) {
					data[mime] = v
				}
			}
			if _, ok := data["text/plain"]; !ok && p.Text != nil {
				data["text/plain"] = mustJSON(*p.Text)
			}
			if len(data) > 0 {
				pages = append(pages, &Output{Type: jupyter.MsgDisplayData, Data: data, page: true})
			}
		case "set_next_input":
			if p.Text != nil {
				nextInput = *p.Text
			}
		}
	}
	return pages, nextInput
}

func isJSONString(v json.RawMessage) bool {
	var s string
	return json.Unmarshal(v, &s) == nil
}

// plainPage gives o (a copy) the text/plain of its pager output without
// ANSI codes; it reports whether there were any.
func plainPage(o *Output) bool {
	v, ok := o.Data["text/plain"]
	if !ok || !bytes.Contains(v, []byte(`\u001b`)) {
		return false
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return false
	}
	data := make(map[string]json.RawMessage, len(o.Data))
	for k, x := range o.Data {
		data[k] = x
	}
	data["text/plain"] = mustJSON(StripANSI(s))
	o.Data = data
	return true
}
