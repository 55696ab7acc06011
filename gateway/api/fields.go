package api

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/goccy/go-json"
)

// FieldError says which input was wrong and how. In is "body", "query" or
// "path"; Type uses FastAPI's names (missing, string_type, json_invalid, ...).
type FieldError struct {
	In    string
	Field string
	Msg   string
	Type  string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return "field '" + e.Field + "': " + e.Msg
}

// Fields is a decoded JSON object body. Getters record the first error;
// check Err once after reading every field.
//
// JSON null is treated as absent for every field (the SDK sends null for an
// optional argument passed as None).
//
// Fields from Decode are lenient, as the v1 routes (pydantic's lax mode)
// are: "5" is a number and "yes" a boolean. Fields from DecodeStrict (the
// v2 routes) want JSON's own types.
type Fields struct {
	m      map[string]json.RawMessage
	err    *FieldError
	strict bool
	read   map[string]bool // names a getter or Known asked for
}

// DecodeStrict parses a v2 request body as Decode does, but its getters
// accept only JSON's own types: a number must be a JSON number, a boolean
// true or false.
func DecodeStrict(body []byte) (*Fields, *FieldError) {
	f, fe := Decode(body)
	if f != nil {
		f.strict = true
	}
	return f, fe
}

// Decode parses a request body. An empty body (or JSON null) is {}.
func Decode(body []byte) (*Fields, *FieldError) {
	f := &Fields{m: map[string]json.RawMessage{}}
	b := bytes.TrimSpace(body)
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return f, nil
	}
	if b[0] != '{' {
		return nil, &FieldError{In: "body", Msg: "body must be a JSON object", Type: "model_attributes_type"}
	}
	if err := json.Unmarshal(b, &f.m); err != nil {
		return nil, &FieldError{In: "body", Msg: "body is not valid JSON: " + err.Error(), Type: "json_invalid"}
	}
	return f, nil
}

// FromMap builds Fields from already-decoded values (query strings, forms).
func FromMap(in string, m map[string]string) *Fields {
	f := &Fields{m: make(map[string]json.RawMessage, len(m))}
	for k, v := range m {
		b, _ := json.Marshal(v)
		f.m[k] = b
	}
	return f
}

// Err is the first error any getter recorded.
func (f *Fields) Err() *FieldError { return f.err }

// Known marks fields as understood without reading them (a protocol's own
// keys, such as a WebSocket message's type and id).
func (f *Fields) Known(names ...string) {
	for _, n := range names {
		f.mark(n)
	}
}

func (f *Fields) mark(name string) {
	if f.read == nil {
		f.read = map[string]bool{}
	}
	f.read[name] = true
}

// Unknown lists, sorted, the fields of the body that no getter read and
// Known did not name: call it after reading every field.
func (f *Fields) Unknown() []string {
	var out []string
	for k := range f.m {
		if !f.read[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// Has reports whether the field is present and not null.
func (f *Fields) Has(name string) bool {
	f.mark(name)
	r, ok := f.m[name]
	return ok && !isNull(r)
}

func isNull(r json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(r), []byte("null")) }

func (f *Fields) fail(name, msg, typ string) {
	if f.err == nil {
		f.err = &FieldError{In: "body", Field: name, Msg: msg, Type: typ}
	}
}

// Str reads a string field. A required field that is absent or null is an error.
func (f *Fields) Str(name string, required bool) string {
	f.mark(name)
	r, ok := f.m[name]
	if !ok || isNull(r) {
		if required {
			f.fail(name, "is required", "missing")
		}
		return ""
	}
	var s string
	if err := json.Unmarshal(r, &s); err != nil {
		f.fail(name, "must be a string, got "+kind(r), "string_type")
		return ""
	}
	return s
}

// Code reads a required string of code to run. A NUL byte is refused: no
// runtime takes it (ipykernel 6.17 went idle without a reply, the call
// looked ok and nothing ran).
func (f *Fields) Code(name string) string {
	s := f.Str(name, true)
	if i := strings.IndexByte(s, 0); i >= 0 {
		f.fail(name, fmt.Sprintf("must not contain a NUL character (U+0000, at byte %d)", i), "value_error")
		return ""
	}
	return s
}

// OptStr reads an optional string field: nil when absent or null.
func (f *Fields) OptStr(name string) *string {
	if !f.Has(name) {
		return nil
	}
	s := f.Str(name, false)
	if f.err != nil && f.err.Field == name {
		return nil
	}
	return &s
}

// Bool reads a boolean; true/false, "true"/"false"/"yes"/"no", 1/0 are
// accepted as pydantic's lax mode does. Absent or null gives def.
func (f *Fields) Bool(name string, def bool) bool {
	f.mark(name)
	r, ok := f.m[name]
	if !ok || isNull(r) {
		return def
	}
	if f.strict {
		switch string(bytes.TrimSpace(r)) {
		case "true":
			return true
		case "false":
			return false
		}
		f.fail(name, "must be true or false, got "+kind(r), "bool_type")
		return def
	}
	switch string(bytes.TrimSpace(r)) {
	case "true", `"true"`, `"yes"`, `"1"`, "1", `"on"`:
		return true
	case "false", `"false"`, `"no"`, `"0"`, "0", `"off"`:
		return false
	}
	f.fail(name, "must be a boolean, got "+kind(r), "bool_type")
	return def
}

// Float reads a number (a numeric string is accepted too, unless the
// fields are strict). ok is false when the field is absent or null.
func (f *Fields) Float(name string) (v float64, ok bool) {
	f.mark(name)
	r, present := f.m[name]
	if !present || isNull(r) {
		return 0, false
	}
	if err := json.Unmarshal(r, &v); err != nil {
		var s string
		if !f.strict && json.Unmarshal(r, &s) == nil {
			if p, perr := strconv.ParseFloat(s, 64); perr == nil {
				return p, true
			} else if errors.Is(perr, strconv.ErrRange) {
				f.fail(name, fmt.Sprintf("is out of range: %.40s does not fit a 64-bit float", s), "float_parsing")
				return 0, false
			}
		}
		if lit := bytes.TrimSpace(r); kind(lit) == "a number" {
			if _, perr := strconv.ParseFloat(string(lit), 64); errors.Is(perr, strconv.ErrRange) {
				f.fail(name, fmt.Sprintf("is out of range: %.40s does not fit a 64-bit float", lit), "float_parsing")
				return 0, false
			}
		}
		f.fail(name, "must be a number, got "+kind(r), "float_type")
		return 0, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		f.fail(name, "must be a finite number", "float_type")
		return 0, false
	}
	return v, true
}

// Int reads an integer; a float with a fraction is an error.
func (f *Fields) Int(name string) (v int64, ok bool) {
	x, ok := f.Float(name)
	if !ok {
		return 0, false
	}
	if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
		f.fail(name, fmt.Sprintf("must be an integer, got %v", x), "int_from_float")
		return 0, false
	}
	return int64(x), true
}

// StrList reads a list of strings; absent or null gives nil.
func (f *Fields) StrList(name string) []string {
	f.mark(name)
	r, ok := f.m[name]
	if !ok || isNull(r) {
		return nil
	}
	var v []string
	if err := json.Unmarshal(r, &v); err != nil {
		f.fail(name, "must be a list of strings, got "+kind(r), "list_type")
		return nil
	}
	return v
}

// IntList reads a list of integers; absent or null gives nil.
func (f *Fields) IntList(name string) []int64 {
	f.mark(name)
	r, ok := f.m[name]
	if !ok || isNull(r) {
		return nil
	}
	var v []int64
	if err := json.Unmarshal(r, &v); err != nil {
		f.fail(name, "must be a list of integers, got "+kind(r), "list_type")
		return nil
	}
	return v
}

// StrMap reads an object of strings (null values kept as ""); absent or null gives nil.
func (f *Fields) StrMap(name string) map[string]string {
	f.mark(name)
	r, ok := f.m[name]
	if !ok || isNull(r) {
		return nil
	}
	var v map[string]*string
	if err := json.Unmarshal(r, &v); err != nil {
		f.fail(name, "must be an object of strings, got "+kind(r), "dict_type")
		return nil
	}
	out := make(map[string]string, len(v))
	for k, s := range v {
		if s != nil {
			out[k] = *s
		} else {
			out[k] = ""
		}
	}
	return out
}

// kind names the JSON type of a raw value for error messages.
func kind(r json.RawMessage) string {
	b := bytes.TrimSpace(r)
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "a list"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}
