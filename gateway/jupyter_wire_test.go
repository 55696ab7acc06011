package gateway

import (
	"bytes"
	"testing"

	"github.com/aiod/aiod/kernel"
)

// Both framings round-trip a message with buffers, and truncated or lying
// frames are refused rather than read out of bounds.
func TestJupyterWireRoundTrip(t *testing.T) {
	m := &kernel.Message{
		Channel:  "shell",
		Header:   kernel.NewHeader("s", "m1", "comm_msg"),
		Parent:   kernel.NewHeader("s", "p1", "execute_request"),
		Metadata: []byte(`{"k":1}`),
		Content:  []byte(`{"data":{"x":"é"}}`),
		Buffers:  [][]byte{{1, 2, 3}, {}, []byte("four")},
	}
	check := func(name string, got *kernel.Message, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Channel != m.Channel || got.Header != m.Header || got.Parent != m.Parent ||
			!bytes.Equal(got.Content, m.Content) || !bytes.Equal(got.Metadata, m.Metadata) || len(got.Buffers) != 3 ||
			!bytes.Equal(got.Buffers[0], m.Buffers[0]) || len(got.Buffers[1]) != 0 || string(got.Buffers[2]) != "four" {
			t.Fatalf("%s: round trip changed the message: %+v", name, got)
		}
	}
	v1 := encodeJupyterV1(m)
	got, err := decodeJupyterV1(v1)
	check("v1", got, err)
	legacy, bin, err := encodeJupyterLegacy(m)
	if err != nil || !bin {
		t.Fatalf("legacy with buffers: binary=%v err=%v", bin, err)
	}
	got, err = decodeJupyterLegacy(legacy, true)
	check("legacy", got, err)
	for i := 0; i < len(v1); i++ {
		if _, err := decodeJupyterV1(v1[:i]); err == nil && i < len(v1)-len("four") {
			t.Fatalf("v1 accepted a frame cut at %d", i)
		}
		_, _ = decodeJupyterLegacy(legacy[:i], true) // must not panic
	}
	noParent := &kernel.Message{Channel: "iopub", Header: kernel.NewHeader("s", "m2", "status"), Content: []byte(`{"execution_state":"idle"}`)}
	text, bin, _ := encodeJupyterLegacy(noParent)
	if bin || !bytes.Contains(text, []byte(`"parent_header":{}`)) || !bytes.Contains(text, []byte(`"channel":"iopub"`)) {
		t.Fatalf("legacy text: %s", text)
	}
}

func FuzzDecodeJupyterFrames(f *testing.F) {
	m := &kernel.Message{Channel: "shell", Header: kernel.NewHeader("s", "m", "x"), Buffers: [][]byte{{9}}}
	f.Add(encodeJupyterV1(m), false)
	b, _, _ := encodeJupyterLegacy(m)
	f.Add(b, true)
	f.Fuzz(func(t *testing.T, b []byte, legacy bool) {
		if legacy {
			_, _ = decodeJupyterLegacy(b, true)
		} else {
			_, _ = decodeJupyterV1(b)
		}
	})
}
