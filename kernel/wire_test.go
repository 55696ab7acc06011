package kernel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func sampleMessage() *jupyter.Message {
	return &jupyter.Message{
		Channel:  "shell",
		Header:   jupyter.NewHeader("sess", "m1", "execute_request"),
		Parent:   jupyter.NewHeader("sess", "m0", "kernel_info_request"),
		Metadata: []byte(`{"a":1}`),
		Content:  []byte(`{"code":"print(\"hi\")","silent":false}`),
		Buffers:  [][]byte{[]byte("raw\x00bytes")},
	}
}

func TestWireRoundTrip(t *testing.T) {
	t.Parallel()
	for _, key := range [][]byte{testKey, nil} {
		m := sampleMessage()
		frames, err := encode(newSigner(key), m)
		if err != nil {
			t.Fatal(err)
		}
		// Identities before the delimiter (or an iopub topic) are ignored.
		frames = append([][]byte{[]byte("identity")}, frames...)
		got, err := decode(newSigner(key), "shell", frames)
		if err != nil {
			t.Fatalf("decode with key %q: %v", key, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, m)
		}
	}
}

func TestWireEmptyParts(t *testing.T) {
	t.Parallel()
	m := &jupyter.Message{Channel: "iopub", Header: jupyter.NewHeader("s", "id", "status")}
	frames, err := encode(newSigner(testKey), m)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"{}", "{}", "{}"} {
		if got := string(frames[3+i]); got != want {
			t.Errorf("part %d = %s, want %s", i+1, got, want)
		}
	}
	got, err := decode(newSigner(testKey), "iopub", frames)
	if err != nil {
		t.Fatal(err)
	}
	if got.Parent != (jupyter.Header{}) || got.Buffers != nil {
		t.Errorf("decoded %+v", got)
	}
}

func TestWireHeader(t *testing.T) {
	t.Parallel()
	h := jupyter.NewHeader("s", "id", "execute_request")
	if h.Version != "5.3" || h.Username != "aiod" {
		t.Errorf("header %+v", h)
	}
	d, err := time.Parse(jupyter.DateFormat, h.Date)
	if err != nil || time.Since(d) > time.Minute || len(h.Date) != len("2006-01-02T15:04:05.000000Z") {
		t.Errorf("date %q: %v", h.Date, err)
	}
	if a, b := jupyter.NewID(), jupyter.NewID(); a == b || len(a) != 36 {
		t.Errorf("ids %q %q", a, b)
	}
}

func TestWireBadSignature(t *testing.T) {
	t.Parallel()
	frames, err := encode(newSigner(testKey), sampleMessage())
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func([][]byte){
		"other key":       func(f [][]byte) { copy(f[1], newSigner([]byte("other")).sign(f[2:6])) },
		"tampered header": func(f [][]byte) { f[2] = bytes.Replace(f[2], []byte("m1"), []byte("m2"), 1) },
		"tampered content": func(f [][]byte) {
			f[5] = bytes.Replace(f[5], []byte("hi"), []byte("ho"), 1)
		},
		"not hex":   func(f [][]byte) { f[1] = []byte("zz") },
		"empty sig": func(f [][]byte) { f[1] = nil },
	}
	for name, tamper := range cases {
		f := cloneFrames(frames)
		tamper(f)
		if _, err := decode(newSigner(testKey), "shell", f); !errors.Is(err, errBadSignature) {
			t.Errorf("%s: err = %v, want bad signature", name, err)
		}
	}
}

func TestWireMalformed(t *testing.T) {
	t.Parallel()
	frames, _ := encode(newSigner(testKey), sampleMessage())
	cases := map[string][][]byte{
		"no delimiter": frames[1:],
		"too short":    frames[:5],
		"empty":        nil,
	}
	bad := cloneFrames(frames)
	bad[5] = []byte(`[1,2]`)
	copy(bad[1], newSigner(testKey).sign(bad[2:6]))
	cases["content not object"] = bad
	for name, f := range cases {
		if _, err := decode(newSigner(testKey), "shell", f); !errors.Is(err, errMalformed) {
			t.Errorf("%s: err = %v, want malformed", name, err)
		}
	}
}

func cloneFrames(f [][]byte) [][]byte {
	out := make([][]byte, len(f))
	for i := range f {
		out[i] = bytes.Clone(f[i])
	}
	return out
}

// joinFrames packs frames as length-prefixed records, the fuzz input shape.
func joinFrames(frames [][]byte) []byte {
	var b []byte
	for _, f := range frames {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

// splitFrames undoes joinFrames; any input gives some frames (a length past
// the end takes the rest), so the fuzzer also explores split frames.
func splitFrames(b []byte) [][]byte {
	var frames [][]byte
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 {
			return append(frames, b)
		}
		b = b[k:]
		if n > uint64(len(b)) {
			n = uint64(len(b))
		}
		frames = append(frames, b[:n])
		b = b[n:]
	}
	return frames
}

// FuzzDecode checks that decode never panics and that whatever it accepts
// survives an encode/decode round trip.
func FuzzDecode(f *testing.F) {
	frames, _ := encode(newSigner(testKey), sampleMessage())
	f.Add(joinFrames(frames))
	f.Add(joinFrames(append([][]byte{[]byte("topic")}, frames...)))
	f.Add(joinFrames(frames[:4]))
	f.Add(joinFrames([][]byte{[]byte(delimiter), nil, []byte("{"), nil, nil, nil}))
	f.Add([]byte("<IDS|MSG>"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, key := range [][]byte{testKey, nil} {
			m, err := decode(newSigner(key), "shell", splitFrames(data))
			if err != nil {
				continue
			}
			again, err := encode(newSigner(key), m)
			if err != nil {
				t.Fatalf("encode of decoded message: %v", err)
			}
			if _, err := decode(newSigner(key), "shell", again); err != nil {
				t.Fatalf("decode of re-encoded message: %v", err)
			}
		}
	})
}
