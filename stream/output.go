package stream

import (
	"regexp"
	"strings"

	"github.com/goccy/go-json"
)

// Output is one notebook output in aiod's internal form. Both REST
// serialisations (compact for v2, nine-field for v1) are rendered from it.
type Output struct {
	Type           string                     // stream, execute_result, display_data, error
	Name           string                     // stream: stdout or stderr
	Text           string                     // stream text
	Data           map[string]json.RawMessage // MIME bundle (values raw JSON)
	Metadata       json.RawMessage            // a JSON object, nil means {}
	ExecutionCount *int                       // execute_result
	Ename, Evalue  string                     // error
	Traceback      []string                   // error, plain text
	DisplayID      string                     // transient display_id, for update_display_data
	Truncated      bool                       // part of this output was cut by the budget

	text *strings.Builder // stream text while folding
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

// Compact renders the v2 form of the output.
func (o *Output) Compact() any {
	switch o.Type {
	case "stream":
		return compactStream{"stream", o.Name, o.Text}
	case "execute_result":
		return compactResult{"execute_result", o.data(), o.metadata(), o.ExecutionCount}
	case "error":
		return compactError{"error", o.Ename, o.Evalue, o.traceback()}
	default:
		return compactDisplay{o.Type, o.data(), o.metadata()}
	}
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
		n.Name, n.Text = ptr(o.Name), ptr(o.Text)
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
