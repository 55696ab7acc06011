package execution

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/goccy/go-json"
)

// TestAppendJSONStringIsTheEncoders: AppendJSONString writes exactly what
// goccy's encoder (without HTML escaping, as every answer is encoded)
// writes, for every byte alone, the separators, invalid and cut UTF-8, and
// random mixes of them.
func TestAppendJSONStringIsTheEncoders(t *testing.T) {
	check := func(s string) {
		t.Helper()
		want, err := json.MarshalWithOption(s, json.DisableHTMLEscape())
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendJSONString([]byte("x"), s); !bytes.Equal(got[1:], want) || got[0] != 'x' {
			t.Errorf("AppendJSONString(%q) = %s, want %s", s, got, want)
		}
		// A collected stream's compact object, written by hand.
		o := &Output{Type: "stream", Name: "stdout", Text: s}
		wantObj, _ := json.MarshalWithOption(o.Compact(), json.DisableHTMLEscape())
		if got, err := o.CompactJSON(); err != nil || !bytes.Equal(got, wantObj) {
			t.Errorf("CompactJSON of %q = %s (%v), want %s", s, got, err, wantObj)
		}
	}
	for c := range 256 {
		check(string([]byte{byte(c)}))
		check("ab" + string([]byte{byte(c)}) + "cd")
	}
	for _, s := range []string{"", "plain", "<b>&amp;</b>", "\u2028\u2029 x\u2028", "é😀\ufffd", "\xed\xa0\x80", "\xc0\x80",
		"a\xc3", "\xe2\x80", "\xf0\x9f\x98", "tab\there\r\nnew\"quote\\back", "\x1b[31mred\x1b[0m"} {
		check(s)
	}
	alphabet := []string{"a", "\n", "\"", "\\", "\x00", "\x1f", "\x7f", "é", "😀", "\u2028", "\xff", "\xe2", "\x80", "<", "\t"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var b []byte
		for range r.IntN(40) {
			b = append(b, alphabet[r.IntN(len(alphabet))]...)
		}
		check(string(b))
	}
}
