package execution

import (
	"strings"
	"testing"

	"github.com/goccy/go-json"
)

func TestDecodeStreamMatchesJSON(t *testing.T) {
	texts := []string{
		"", "plain", "a\nb\t\"q\"\\", "é€😀 mixed ünïcode\u2028", strings.Repeat("x", 200000) + "\n" + strings.Repeat("€", 50000),
		"\x00\x1f control", "😀 pair",
		`\`, `\\`, `\"`, `\\"`, `"\`, `\\\"x\"`, // runs of backslashes before a quote
	}
	for _, want := range texts {
		for _, raw := range [][]byte{
			mustMarshal(map[string]string{"name": "stderr", "text": want}),
			[]byte(`{"text":` + string(mustMarshal(want)) + `, "other": {"a": [1, "}"]}, "name" : "stderr"}`),
		} {
			var got strings.Builder
			var names []string
			err := decodeStream(raw, func(name string, chunk []byte) {
				names = append(names, name)
				got.Write(chunk)
			})
			if err != nil || got.String() != want {
				t.Fatalf("decodeStream(%.60q): err %v, got %d bytes want %d", raw, err, got.Len(), len(want))
			}
			for _, n := range names {
				if n != "stderr" {
					t.Fatalf("name = %q", n)
				}
			}
		}
	}
}

func TestDecodeStreamRejectsGarbage(t *testing.T) {
	for _, raw := range []string{``, `{`, `{"text":"abc`, `{"text":"\x"}`, `{"text":"\u12"}`, `[1]`, `{"text" "a"}`} {
		if err := decodeStream([]byte(raw), func(string, []byte) {}); err == nil {
			t.Errorf("accepted %q", raw)
		}
	}
}

func FuzzDecodeStream(f *testing.F) {
	f.Add([]byte(`{"name":"stdout","text":"a\nb\u00e9"}`))
	f.Add([]byte(`{"text":"\ud83d\ude00","name":"stderr"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var got strings.Builder
		err := decodeStream(raw, func(_ string, chunk []byte) { got.Write(chunk) })
		// The key is "text" exactly (a struct field would match "teXt").
		var ref map[string]any
		if err != nil || json.Unmarshal(raw, &ref) != nil {
			return
		}
		text, ok := ref["text"].(string)
		if !ok {
			return
		}
		// Invalid UTF-8 may be kept or replaced; everything else must agree.
		if strings.ToValidUTF8(text, "\uFFFD") != strings.ToValidUTF8(got.String(), "\uFFFD") {
			t.Fatalf("decodeStream(%q) = %q, json says %q", raw, got.String(), text)
		}
	})
}

func mustMarshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// decodeStream (the way Decode and the collector together read a stream
// message) reads a stream message's content ({"name": ..., "text": ...})
// without building the whole text as one string: the text is unescaped in
// chunks of about 64 KiB and passed to emit in order. A kernel can send
// a 100 MB stream message; this keeps the collector's copy within its
// budget instead of doubling the message in memory.
//
// The chunk passed to emit is only valid during the call.
func decodeStream(raw []byte, emit func(name string, chunk []byte)) error {
	name, text, err := streamSpans(raw)
	if err != nil {
		return err
	}
	return unescapeChunks(text, func(b []byte) { emit(name, b) })
}
