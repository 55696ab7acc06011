package jupyter

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
)

// Made by jupyter_server 1.23's serialize_msg_to_ws_v1 (iopub
// display_data, parent p1, one 3-byte buffer) and serialize_binary_message
// (legacy binary: iopub comm_msg with buffers "abc" and "\xff").
const (
	goldenV1 = "070000000000000040000000000000004500000000000000c0000000000000002301000000000000250100000000000040010000000000004301000000000000696f7075627b226d73675f6964223a226d31222c2273657373696f6e223a2273222c22757365726e616d65223a2275222c2264617465223a22323032362d30312d30315430303a30303a30302e3030303030305a222c226d73675f74797065223a22646973706c61795f64617461222c2276657273696f6e223a22352e33227d7b226d73675f6964223a227031222c2273657373696f6e223a2273222c22757365726e616d65223a2275222c2264617465223a22222c226d73675f74797065223a22657865637574655f72657175657374222c2276657273696f6e223a22352e33227d7b7d7b2264617461223a7b22746578742f706c61696e223a2278227d7d000102"

	goldenLegacyBinary = "0000000300000010000000d6000000d97b22686561646572223a207b226d73675f6964223a20226d32222c20226d73675f74797065223a2022636f6d6d5f6d7367222c202273657373696f6e223a202273222c2022757365726e616d65223a202275222c202264617465223a202264222c202276657273696f6e223a2022352e33227d2c2022706172656e745f686561646572223a207b7d2c20226d65746164617461223a207b7d2c2022636f6e74656e74223a207b2264617461223a207b7d7d2c20226368616e6e656c223a2022696f707562227d616263ff"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeV1Golden(t *testing.T) {
	b := mustHex(t, goldenV1)
	m, err := DecodeV1(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Channel != "iopub" || m.Header.MsgID != "m1" || m.Header.MsgType != "display_data" ||
		m.Parent.MsgID != "p1" || string(m.Metadata) != "{}" || string(m.Content) != `{"data":{"text/plain":"x"}}` ||
		len(m.Buffers) != 1 || !bytes.Equal(m.Buffers[0], []byte{0, 1, 2}) {
		t.Errorf("decoded %+v", m)
	}
	// aiod writes the very bytes Jupyter Server writes.
	again, err := EncodeV1(m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, b) {
		t.Errorf("EncodeV1(DecodeV1(golden)) differs:\n got %x\nwant %x", again, b)
	}
}

func TestDecodeLegacyBinaryGolden(t *testing.T) {
	m, err := DecodeLegacy(mustHex(t, goldenLegacyBinary), true)
	if err != nil {
		t.Fatal(err)
	}
	if m.Channel != "iopub" || m.Header.MsgID != "m2" || m.Header.MsgType != "comm_msg" || m.Parent.MsgID != "" ||
		!reflect.DeepEqual(m.Buffers, [][]byte{[]byte("abc"), {0xff}}) {
		t.Errorf("decoded %+v", m)
	}
}

func sampleMessages() []*Message {
	h := NewHeader("sess", "id-1", "execute_request")
	p := NewHeader("sess", "id-0", "kernel_info_request")
	return []*Message{
		{Channel: "shell", Header: h, Content: []byte(`{"code":"print(\"hi\")\n","silent":false}`)},
		{Channel: "iopub", Header: h, Parent: p, Metadata: []byte(`{"a":1}`), Content: []byte(`{"name":"stdout","text":"é\u0000"}`)},
		{Channel: "iopub", Header: h, Parent: p, Content: []byte(`{"data":{}}`), Buffers: [][]byte{{}, {1, 2, 3}, bytes.Repeat([]byte{7}, 1000)}},
		{Channel: "control", Header: h},
	}
}

// normal returns m as a decoder returns it: nil metadata and content as {}.
func normal(m *Message) *Message {
	c := *m
	_, _, c.Metadata, c.Content, _ = m.Parts()
	if len(c.Buffers) == 0 {
		c.Buffers = nil
	}
	return &c
}

// framing is one of the two, for table tests.
type framing struct {
	name   string
	encode func(*Message) ([]byte, bool, error)
	decode func([]byte, bool) (*Message, error)
}

var framings = []framing{
	{"v1", func(m *Message) ([]byte, bool, error) { b, err := EncodeV1(m); return b, true, err },
		func(b []byte, _ bool) (*Message, error) { return DecodeV1(b) }},
	{"legacy", EncodeLegacy, DecodeLegacy},
}

func TestRoundTrip(t *testing.T) {
	for _, f := range framings {
		for i, m := range sampleMessages() {
			b, bin, err := f.encode(m)
			if err != nil {
				t.Fatalf("%s #%d: encode: %v", f.name, i, err)
			}
			wantBin := true
			if f.name == "legacy" && len(m.Buffers) == 0 {
				wantBin = false
			}
			if bin != wantBin {
				t.Errorf("%s #%d: binary frame %v, want %v", f.name, i, bin, wantBin)
			}
			got, err := f.decode(b, bin)
			if err != nil {
				t.Fatalf("%s #%d: decode: %v", f.name, i, err)
			}
			got.Metadata = compact(got.Metadata)
			got.Content = compact(got.Content)
			if want := normal(m); !reflect.DeepEqual(got, want) {
				t.Errorf("%s #%d: round trip\n got %+v\nwant %+v", f.name, i, got, want)
			}
		}
	}
}

// compact removes the spaces a JSON encoder may add (none of the samples
// has spaces in its strings).
func compact(b []byte) []byte {
	return bytes.ReplaceAll(b, []byte(" "), nil)
}

func TestV1Layout(t *testing.T) {
	m := &Message{Channel: "shell", Header: Header{MsgID: "x"}, Buffers: [][]byte{[]byte("B")}}
	b, err := EncodeV1(m)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	if n != 7 { // channel start + 5 part ends + 1 buffer end
		t.Fatalf("offset count %d, want 7", n)
	}
	first := binary.LittleEndian.Uint64(b[8:])
	last := binary.LittleEndian.Uint64(b[8*n:])
	if first != 8*(1+n) || last != uint64(len(b)) || string(b[first:first+5]) != "shell" {
		t.Errorf("offsets: first %d last %d len %d", first, last, len(b))
	}
}

func TestDecodeRejects(t *testing.T) {
	v1 := func(count uint64, offsets ...uint64) []byte {
		b := binary.LittleEndian.AppendUint64(nil, count)
		for _, o := range offsets {
			b = binary.LittleEndian.AppendUint64(b, o)
		}
		return append(b, "iopub{}{}{}{}"...)
	}
	for name, b := range map[string][]byte{
		"empty":             {},
		"short":             {1, 2, 3},
		"huge count":        v1(1<<62, 56),
		"count too small":   v1(5, 48, 53, 55, 57, 59),
		"offset past end":   v1(6, 56, 61, 63, 65, 67, 1000),
		"offsets backwards": v1(6, 56, 61, 59, 65, 67, 69),
		"offset in header":  v1(6, 8, 61, 63, 65, 67, 69),
		"empty channel":     v1(6, 56, 56, 58, 60, 62, 64),
		"not json":          append(v1(6, 56, 61, 63, 65, 67, 69)[:56], "iopubxx{}{}{}"...),
	} {
		if _, err := DecodeV1(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
	if m, err := DecodeV1(v1(6, 56, 61, 63, 65, 67, 69)); err != nil || m.Channel != "iopub" {
		t.Errorf("smallest valid v1 message: %v %v", m, err)
	}
	for name, b := range map[string]string{
		"not json":      "hello",
		"content array": `{"channel":"iopub","header":{},"parent_header":{},"metadata":{},"content":[]}`,
		"header string": `{"channel":"iopub","header":"x","parent_header":{},"metadata":{},"content":{}}`,
	} {
		if _, err := DecodeLegacy([]byte(b), false); !errors.Is(err, ErrMalformed) {
			t.Errorf("legacy %s: err = %v, want ErrMalformed", name, err)
		}
	}
	if _, err := DecodeLegacy([]byte{0, 0, 0, 9, 0}, true); !errors.Is(err, ErrMalformed) {
		t.Errorf("legacy binary with a bad count: %v", err)
	}
	// No channel is shell, as Jupyter Server takes it.
	if m, err := DecodeLegacy([]byte(`{"header":{"msg_type":"kernel_info_request"},"parent_header":{},"metadata":{},"content":{}}`), false); err != nil || m.Channel != Shell {
		t.Errorf("no channel: %+v %v", m, err)
	}
	// A null parent_header and metadata, as some servers send, are {}.
	m, err := DecodeLegacy(
		[]byte(`{"channel":"iopub","header":{"msg_id":"a"},"parent_header":null,"metadata":null,"content":{}}`), false)
	if err != nil || m.Parent.MsgID != "" || string(m.Metadata) != "{}" {
		t.Errorf("null parts: %+v %v", m, err)
	}
}

// The header's date is a string, a number (jupyter_server 1.23's gateway
// client sends time.time()) or null; other shapes are refused, and a
// message whose header was read says what it was.
func TestDecodeHeaderDates(t *testing.T) {
	msg := func(date string) []byte {
		return []byte(`{"channel":"shell","header":{"msg_id":"m","session":"s","msg_type":"kernel_info_request","date":` + date +
			`},"parent_header":{"date":` + date + `},"metadata":{},"content":{}}`)
	}
	for date, want := range map[string]string{
		`"2026-01-01T00:00:00.000000Z"`: "2026-01-01T00:00:00.000000Z",
		`"whatever"`:                    "whatever",
		`1767225600.5`:                  "2026-01-01T00:00:00.500000Z",
		`1767225600`:                    "2026-01-01T00:00:00.000000Z",
		`null`:                          "",
	} {
		m, err := DecodeLegacy(msg(date), false)
		if err != nil {
			t.Errorf("date %s: %v", date, err)
			continue
		}
		if m.Header.Date != want || m.Parent.Date != want || m.Header.MsgType != "kernel_info_request" || m.Header.Session != "s" {
			t.Errorf("date %s: header %+v parent %+v, want date %q", date, m.Header, m.Parent, want)
		}
		b, _ := EncodeV1(m)
		if m2, err := DecodeV1(b); err != nil || m2.Header != m.Header {
			t.Errorf("date %s: v1 round trip: %+v %v", date, m2, err)
		}
	}
	for _, date := range []string{`{}`, `[1]`, `true`, `1e300`} {
		if _, err := DecodeLegacy(msg(date), false); !errors.Is(err, ErrMalformed) {
			t.Errorf("date %s: err = %v, want ErrMalformed", date, err)
		}
	}
	// A bad content after a good header: the error names the message.
	_, err := DecodeLegacy([]byte(`{"channel":"shell","header":{"msg_id":"m","session":"s","msg_type":"execute_request"},"parent_header":{},"metadata":{},"content":[]}`), false)
	var bad *BadMessageError
	if !errors.As(err, &bad) || !errors.Is(err, ErrMalformed) || bad.Header.MsgID != "m" || bad.Channel != "shell" {
		t.Errorf("bad content: err = %#v", err)
	}
}

// FuzzDecodeV1 checks that the v1 decoder never panics and that what it
// accepts survives a round trip.
func FuzzDecodeV1(f *testing.F) {
	f.Add(mustHex(f, goldenV1))
	for _, m := range sampleMessages() {
		b, _ := EncodeV1(m)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeV1(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		e1, err := EncodeV1(m)
		if err != nil {
			t.Fatalf("decoded message does not encode: %v", err)
		}
		m2, err := DecodeV1(e1)
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		// Headers are normalised by the JSON encoder (invalid UTF-8, escapes);
		// the rest passes through untouched, and a second trip changes nothing.
		if m2.Channel != m.Channel || !bytes.Equal(m2.Content, m.Content) || !bytes.Equal(m2.Metadata, m.Metadata) ||
			!reflect.DeepEqual(m2.Buffers, m.Buffers) {
			t.Fatalf("round trip changed the message:\n%+v\n%+v", m, m2)
		}
		e2, err := EncodeV1(m2)
		if err != nil || !bytes.Equal(e1, e2) {
			t.Fatalf("second round trip differs: %v", err)
		}
	})
}

// FuzzDecodeLegacy does the same for the legacy framing, text and binary.
func FuzzDecodeLegacy(f *testing.F) {
	f.Add(false, []byte(`{"channel":"iopub","header":{"msg_id":"a"},"parent_header":{},"metadata":{},"content":{}}`))
	f.Add(true, mustHex(f, goldenLegacyBinary))
	f.Fuzz(func(t *testing.T, binaryFrame bool, b []byte) {
		if _, err := DecodeLegacy(b, binaryFrame); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", err)
		}
	})
}

// Both framings round-trip a message with buffers, and truncated or lying
// frames are refused rather than read out of bounds.
func TestFramingsRoundTripBuffers(t *testing.T) {
	m := &Message{
		Channel:  "shell",
		Header:   NewHeader("s", "m1", "comm_msg"),
		Parent:   NewHeader("s", "p1", "execute_request"),
		Metadata: []byte(`{"k":1}`),
		Content:  []byte(`{"data":{"x":"é"}}`),
		Buffers:  [][]byte{{1, 2, 3}, {}, []byte("four")},
	}
	check := func(name string, got *Message, err error) {
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
	v1 := mustV1(t, m)
	got, err := DecodeV1(v1)
	check("v1", got, err)
	legacy, bin, err := EncodeLegacy(m)
	if err != nil || !bin {
		t.Fatalf("legacy with buffers: binary=%v err=%v", bin, err)
	}
	got, err = DecodeLegacy(legacy, true)
	check("legacy", got, err)
	for i := 0; i < len(v1); i++ {
		if _, err := DecodeV1(v1[:i]); err == nil && i < len(v1)-len("four") {
			t.Fatalf("v1 accepted a frame cut at %d", i)
		}
		_, _ = DecodeLegacy(legacy[:i], true) // must not panic
	}
	noParent := &Message{Channel: "iopub", Header: NewHeader("s", "m2", "status"), Content: []byte(`{"execution_state":"idle"}`)}
	text, bin, _ := EncodeLegacy(noParent)
	if bin || !bytes.Contains(text, []byte(`"parent_header":{}`)) || !bytes.Contains(text, []byte(`"channel":"iopub"`)) {
		t.Fatalf("legacy text: %s", text)
	}
}

func FuzzDecodeFrames(f *testing.F) {
	m := &Message{Channel: "shell", Header: NewHeader("s", "m", "x"), Buffers: [][]byte{{9}}}
	f.Add(mustV1(f, m), false)
	b, _, _ := EncodeLegacy(m)
	f.Add(b, true)
	f.Fuzz(func(t *testing.T, b []byte, legacy bool) {
		if legacy {
			_, _ = DecodeLegacy(b, true)
		} else {
			_, _ = DecodeV1(b)
		}
	})
}

func mustV1(t testing.TB, m *Message) []byte {
	t.Helper()
	b, err := EncodeV1(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
