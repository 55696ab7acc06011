package execution

import (
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
)

// Output is one notebook output in aiod's internal form. Both REST
// serialisations (compact for v2, nine-field for v1) and the WebSocket's
// are rendered from it.
//
// An Output is either collected (the collector's fold of an execution:
// streams merged, clear_output and update_display_data applied) or decoded
// from one message by Decode. A decoded one is shared by every subscriber
// and never changed; a decoded stream keeps its text as the escaped JSON it
// arrived in (StreamText unescapes it), so that a 100 MB message is not
// copied to be forwarded.
type Output struct {
	Type           string                     // stream, execute_result, display_data, error; decoded: also clear_output, update_display_data
	Name           string                     // stream: stdout or stderr
	Text           string                     // stream text (collected, or decoded from odd JSON)
	Data           map[string]json.RawMessage // MIME bundle (values raw JSON)
	Metadata       json.RawMessage            // a JSON object, nil means {}
	ExecutionCount *int                       // execute_result
	Ename, Evalue  string                     // error
	Traceback      []string                   // error, plain text
	DisplayID      string                     // transient display_id, for update_display_data
	Wait           bool                       // clear_output: wait for the next output
	Truncated      bool                       // part of this output was cut by the budget
	page           bool                       // a pager payload of the reply (help text), not a message

	textJSON []byte   // decoded stream: the text, still escaped (a view into the message)
	text     *textBuf // stream text while folding
}

// Decode reads one iopub message into the output it carries, exactly as the
// runtime sent it: a stream chunk is not merged with its neighbours.
// Tracebacks and error names lose their ANSI codes, as in collected
// results; stream text keeps them (Result.Plain strips them for REST). ok is false for messages that carry no
// output (status, execute_input, ...).
func Decode(m *jupyter.Message) (o *Output, ok bool) {
	t := m.Header.MsgType
	if !jupyter.IsOutput(t) {
		return nil, false
	}
	if t == jupyter.MsgStream {
		if name, text, err := streamSpans(m.Content); err == nil {
			return &Output{Type: t, Name: streamName(name), textJSON: text}, true
		}
		var sc jupyter.StreamContent // let the full decoder judge odd but valid JSON
		if json.Unmarshal(m.Content, &sc) != nil {
			return nil, false
		}
		return &Output{Type: t, Name: streamName(sc.Name), Text: sc.Text}, true
	}
	var ct iopubContent
	if json.Unmarshal(m.Content, &ct) != nil {
		return nil, false
	}
	switch t {
	case jupyter.MsgError:
		tb := make([]string, len(ct.Traceback))
		for i, l := range ct.Traceback {
			tb[i] = StripANSI(l)
		}
		return &Output{Type: t, Ename: StripANSI(ct.Ename), Evalue: StripANSI(ct.Evalue), Traceback: tb}, true
	case jupyter.MsgClearOutput:
		return &Output{Type: t, Wait: ct.Wait}, true
	}
	o = &Output{Type: t, Data: ct.Data, Metadata: ct.Metadata, DisplayID: ct.Transient.DisplayID}
	if t == jupyter.MsgExecuteResult {
		o.ExecutionCount = ct.ExecutionCount
	}
	return o, true
}

// iopubContent holds the fields of every iopub content Decode reads.
type iopubContent struct {
	Data           map[string]json.RawMessage `json:"data"`
	Metadata       json.RawMessage            `json:"metadata"`
	ExecutionCount *int                       `json:"execution_count"`
	Ename          string                     `json:"ename"`
	Evalue         string                     `json:"evalue"`
	Traceback      []string                   `json:"traceback"`
	Wait           bool                       `json:"wait"`
	Transient      jupyter.Transient          `json:"transient"`
}

// streamName is the stream's name as aiod reports it: stderr, else stdout.
func streamName(n string) string {
	if n == "stderr" {
		return n
	}
	return "stdout"
}

// StreamText is a stream output's text, unescaped when it was decoded
// from a message.
func (o *Output) StreamText() string {
	if o.textJSON == nil {
		return o.Text
	}
	var b strings.Builder
	b.Grow(len(o.textJSON))
	_ = unescapeChunks(o.textJSON, func(p []byte) { b.Write(p) })
	return b.String()
}

// streamChunks hands a stream output's text to emit in unescaped chunks;
// the chunk is only valid during the call.
func (o *Output) streamChunks(emit func([]byte)) {
	if o.textJSON == nil {
		emit([]byte(o.Text))
		return
	}
	_ = unescapeChunks(o.textJSON, emit) // what was unescaped before a bad escape is kept
}

var emptyObject = json.RawMessage(`{}`)

func (o *Output) metadata() json.RawMessage {
	if len(o.Metadata) == 0 {
		return emptyObject
	}
	return o.Metadata
}

func (o *Output) data() map[string]json.RawMessage {
	if o.Data == nil {
		return map[string]json.RawMessage{}
	}
	return o.Data
}

// compact* are the v2 shapes: only the fields a type uses.
type compactStream struct {
	OutputType string `json:"output_type"`
	Name       string `json:"name"`
	Text       string `json:"text"`
}

type compactResult struct {
	OutputType     string                     `json:"output_type"`
	Data           map[string]json.RawMessage `json:"data"`
	Metadata       json.RawMessage            `json:"metadata"`
	ExecutionCount *int                       `json:"execution_count"`
}

type compactDisplay struct {
	OutputType string                     `json:"output_type"`
	Data       map[string]json.RawMessage `json:"data"`
	Metadata   json.RawMessage            `json:"metadata"`
}

type compactError struct {
	OutputType string   `json:"output_type"`
	Ename      string   `json:"ename"`
	Evalue     string   `json:"evalue"`
	Traceback  []string `json:"traceback"`
}

type compactClear struct {
	OutputType string `json:"output_type"`
	Wait       bool   `json:"wait"`
}

type compactUpdate struct {
	OutputType string                     `json:"output_type"`
	Data       map[string]json.RawMessage `json:"data"`
	Metadata   json.RawMessage            `json:"metadata"`
	DisplayID  string                     `json:"display_id"`
}

// Compact renders the v2 form of the output; clear_output and
// update_display_data (decoded outputs only) keep their own shapes.
func (o *Output) Compact() any {
	switch o.Type {
	case jupyter.MsgStream:
		return compactStream{"stream", o.Name, o.StreamText()}
	case jupyter.MsgClearOutput:
		return compactClear{o.Type, o.Wait}
	case jupyter.MsgUpdateDisplayData:
		return compactUpdate{o.Type, o.data(), o.metadata(), o.DisplayID}
	case "execute_result":
		return compactResult{"execute_result", o.data(), o.metadata(), o.ExecutionCount}
	case "error":
		return compactError{"error", o.Ename, o.Evalue, o.traceback()}
	default:
		return compactDisplay{o.Type, o.data(), o.metadata()}
	}
}

// CompactJSON is Compact as JSON. A decoded stream's text is copied as it
// arrived, escaped, instead of being unescaped and escaped again (unless it
// holds invalid UTF-8, which a WebSocket text message may not carry).
func (o *Output) CompactJSON() ([]byte, error) { return o.AppendCompactJSON(nil, 0) }

// AppendCompactJSON appends CompactJSON's object to dst; a new buffer, when
// one is needed, has room for extra bytes more.
func (o *Output) AppendCompactJSON(dst []byte, extra int) ([]byte, error) {
	if o.Type != jupyter.MsgStream || o.textJSON == nil || !utf8.Valid(o.textJSON) {
		if c, ok := o.Compact().(compactStream); ok { // its text escaped straight into dst
			return c.AppendJSON(dst)
		}
		b, err := json.MarshalWithOption(o.Compact(), json.DisableHTMLEscape())
		return append(dst, b...), err
	}
	name, _ := json.MarshalWithOption(o.Name, json.DisableHTMLEscape())
	if need := len(o.textJSON) + len(name) + 48; cap(dst)-len(dst) < need {
		dst = append(make([]byte, 0, len(dst)+need+extra), dst...)
	}
	dst = append(dst, `{"output_type":"stream","name":`...)
	dst = append(dst, name...)
	dst = append(dst, `,"text":"`...)
	dst = append(dst, o.textJSON...)
	return append(dst, `"}`...), nil
}

// NineField is the v1 jupyter form: always nine fields, unused ones null.
type NineField struct {
	Data           map[string]json.RawMessage `json:"data"`
	Ename          *string                    `json:"ename"`
	Evalue         *string                    `json:"evalue"`
	ExecutionCount *int                       `json:"execution_count"`
	Metadata       json.RawMessage            `json:"metadata"`
	Name           *string                    `json:"name"`
	OutputType     string                     `json:"output_type"`
	Text           *string                    `json:"text"`
	Traceback      []string                   `json:"traceback"`
}

// NineField renders the v1 jupyter form of the output.
func (o *Output) NineField() NineField {
	n := NineField{OutputType: o.Type, Metadata: json.RawMessage("null")}
	switch o.Type {
	case "stream":
		n.Name, n.Text = ptr(o.Name), ptr(o.StreamText())
	case "error":
		n.Ename, n.Evalue, n.Traceback = ptr(o.Ename), ptr(o.Evalue), o.traceback()
	default:
		n.Data, n.Metadata = o.data(), o.metadata()
		if o.Type == "execute_result" {
			n.ExecutionCount = o.ExecutionCount
		}
	}
	return n
}

func (o *Output) traceback() []string {
	if o.Traceback == nil {
		return []string{}
	}
	return o.Traceback
}

func ptr[T any](v T) *T { return &v }

// ansi matches CSI escape sequences (colours, cursor moves) and OSC links.
var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)`)

// StripANSI removes terminal escape sequences from s.
func StripANSI(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	return ansi.ReplaceAllString(s, "")
}

// AppendJSON appends the stream output's compact object, as the daemon's
// JSON encoder writes it (AppendJSONString), without a copy of its text.
func (c compactStream) AppendJSON(dst []byte) ([]byte, error) {
	dst = append(dst, `{"output_type":`...)
	dst = AppendJSONString(dst, c.OutputType)
	dst = append(dst, `,"name":`...)
	dst = AppendJSONString(dst, c.Name)
	dst = append(dst, `,"text":`...)
	dst = AppendJSONString(dst, c.Text)
	return append(dst, '}'), nil
}

// JSONSize is about how long AppendJSON's object is: its text and room for
// the rest and a few escapes.
func (c compactStream) JSONSize() int { return 64 + len(c.Name) + len(c.Text) + len(c.Text)/32 }
