package remote

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/aiod/aiod/kernel"
	"github.com/coder/websocket"
	"github.com/goccy/go-json"
)

// SubprotocolV1 is the kernel WebSocket subprotocol aiod offers. When the
// server selects none, the channels socket speaks the legacy protocol.
const SubprotocolV1 = "v1.kernel.websocket.jupyter.org"

// framing is how one channels WebSocket carries messages.
type framing int

const (
	// legacyFraming: one JSON text frame per message, the channel under a
	// "channel" key; a message with buffers is a binary frame instead:
	// u32be count n, n u32be offsets, then the JSON and the buffers.
	legacyFraming framing = iota
	// v1Framing: every message a binary frame: u64le count n, n u64le
	// offsets, then channel, header, parent_header, metadata, content,
	// buffers (offsets[0] is where the channel starts, offsets[i+1] where
	// part i ends).
	v1Framing
)

func (f framing) String() string {
	if f == v1Framing {
		return SubprotocolV1
	}
	return "legacy"
}

var (
	errMalformed = errors.New("malformed message")
	emptyObject  = []byte("{}")
)

// encodeFrame returns m as one WebSocket message in framing f.
func encodeFrame(f framing, m *kernel.Message) (websocket.MessageType, []byte, error) {
	if f == v1Framing {
		b, err := encodeV1(m)
		return websocket.MessageBinary, b, err
	}
	return encodeLegacy(m)
}

// decodeFrame parses one WebSocket message read in framing f. It never
// panics, whatever the input; errors wrap errMalformed.
func decodeFrame(f framing, typ websocket.MessageType, b []byte) (*kernel.Message, error) {
	if f == v1Framing {
		if typ != websocket.MessageBinary {
			return nil, fmt.Errorf("%w: text frame on a %s socket", errMalformed, SubprotocolV1)
		}
		return decodeV1(b)
	}
	if typ == websocket.MessageBinary {
		return decodeLegacyBinary(b)
	}
	return decodeLegacyJSON(b, nil)
}

// encodeV1 returns m in the v1.kernel.websocket.jupyter.org framing.
func encodeV1(m *kernel.Message) ([]byte, error) {
	header, parent, metadata, content, err := m.Parts()
	if err != nil {
		return nil, err
	}
	parts := make([][]byte, 0, 5+len(m.Buffers))
	parts = append(parts, []byte(m.Channel), header, parent, metadata, content)
	parts = append(parts, m.Buffers...)
	nOffsets := len(parts) + 1
	start := 8 * (1 + nOffsets)
	size := start
	for _, p := range parts {
		size += len(p)
	}
	b := make([]byte, start, size)
	binary.LittleEndian.PutUint64(b, uint64(nOffsets))
	off := start
	binary.LittleEndian.PutUint64(b[8:], uint64(off))
	for i, p := range parts {
		off += len(p)
		binary.LittleEndian.PutUint64(b[8*(i+2):], uint64(off))
	}
	for _, p := range parts {
		b = append(b, p...)
	}
	return b, nil
}

// decodeV1 parses a message in the v1.kernel.websocket.jupyter.org
// framing. Bytes after the last offset are ignored, as Jupyter Server does.
func decodeV1(b []byte) (*kernel.Message, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the offset count", errMalformed, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	// channel start, then the ends of channel and the four JSON parts.
	if n < 6 || n > uint64(len(b)-8)/8 {
		return nil, fmt.Errorf("%w: offset count %d for %d bytes", errMalformed, n, len(b))
	}
	offsets := make([]int, n)
	prev := 8 * (1 + int(n))
	for i := range offsets {
		o := binary.LittleEndian.Uint64(b[8*(i+1):])
		if o > uint64(len(b)) || o < uint64(prev) {
			return nil, fmt.Errorf("%w: offset %d is %d (previous %d, size %d)", errMalformed, i, o, prev, len(b))
		}
		offsets[i] = int(o)
		prev = int(o)
	}
	part := func(i int) []byte { return b[offsets[i]:offsets[i+1]:offsets[i+1]] }
	channel := part(0)
	if len(channel) == 0 {
		return nil, fmt.Errorf("%w: empty channel", errMalformed)
	}
	m := &kernel.Message{Channel: string(channel)}
	if err := decodeParts(m, part(1), part(2), part(3), part(4)); err != nil {
		return nil, err
	}
	for i := 5; i < len(offsets)-1; i++ {
		m.Buffers = append(m.Buffers, part(i))
	}
	return m, nil
}

// decodeParts fills m from the four JSON parts.
func decodeParts(m *kernel.Message, header, parent, metadata, content []byte) error {
	if err := json.Unmarshal(header, &m.Header); err != nil {
		return fmt.Errorf("%w: header: %v", errMalformed, err)
	}
	if err := json.Unmarshal(parent, &m.Parent); err != nil {
		return fmt.Errorf("%w: parent_header: %v", errMalformed, err)
	}
	if !kernel.LooksLikeObject(metadata) || !kernel.LooksLikeObject(content) {
		return fmt.Errorf("%w: metadata or content is not a JSON object", errMalformed)
	}
	m.Metadata, m.Content = metadata, content
	return nil
}

// legacyMessage is a message in the legacy JSON framing.
type legacyMessage struct {
	Channel  string          `json:"channel"`
	Header   json.RawMessage `json:"header"`
	Parent   json.RawMessage `json:"parent_header"`
	Metadata json.RawMessage `json:"metadata"`
	Content  json.RawMessage `json:"content"`
	Buffers  []any           `json:"buffers"` // always empty: buffers travel in binary frames
}

// encodeLegacy returns m in the legacy framing: a JSON text frame, or a
// binary frame when m has buffers.
func encodeLegacy(m *kernel.Message) (websocket.MessageType, []byte, error) {
	header, parent, metadata, content, err := m.Parts()
	if err != nil {
		return 0, nil, err
	}
	js, err := json.Marshal(&legacyMessage{
		Channel:  m.Channel,
		Header:   header,
		Parent:   parent,
		Metadata: metadata,
		Content:  content,
		Buffers:  []any{},
	})
	if err != nil {
		return 0, nil, fmt.Errorf("encode %s: %w", m.Header.MsgType, err)
	}
	if len(m.Buffers) == 0 {
		return websocket.MessageText, js, nil
	}
	parts := append([][]byte{js}, m.Buffers...)
	start := 4 * (1 + len(parts))
	size := start
	for _, p := range parts {
		size += len(p)
	}
	if size > math.MaxUint32 {
		return 0, nil, fmt.Errorf("encode %s: %d bytes do not fit the legacy binary framing", m.Header.MsgType, size)
	}
	b := make([]byte, start, size)
	binary.BigEndian.PutUint32(b, uint32(len(parts)))
	off := start
	for i, p := range parts {
		binary.BigEndian.PutUint32(b[4*(i+1):], uint32(off))
		off += len(p)
	}
	for _, p := range parts {
		b = append(b, p...)
	}
	return websocket.MessageBinary, b, nil
}

// decodeLegacyJSON parses a legacy JSON message; buffers come from a
// binary frame.
func decodeLegacyJSON(b []byte, buffers [][]byte) (*kernel.Message, error) {
	var lm legacyMessage
	if err := json.Unmarshal(b, &lm); err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	if lm.Channel == "" {
		return nil, fmt.Errorf("%w: no channel", errMalformed)
	}
	m := &kernel.Message{Channel: lm.Channel}
	if len(lm.Parent) == 0 || bytes.Equal(lm.Parent, []byte("null")) {
		lm.Parent = emptyObject
	}
	if len(lm.Metadata) == 0 || bytes.Equal(lm.Metadata, []byte("null")) {
		lm.Metadata = emptyObject
	}
	if err := decodeParts(m, lm.Header, lm.Parent, lm.Metadata, lm.Content); err != nil {
		return nil, err
	}
	m.Buffers = buffers
	return m, nil
}

// decodeLegacyBinary parses a legacy binary frame: u32be count n, n u32be
// offsets (the first part being the JSON message), then the parts.
func decodeLegacyBinary(b []byte) (*kernel.Message, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the part count", errMalformed, len(b))
	}
	n := binary.BigEndian.Uint32(b)
	if n < 1 || uint64(n) > uint64(len(b)-4)/4 {
		return nil, fmt.Errorf("%w: part count %d for %d bytes", errMalformed, n, len(b))
	}
	offsets := make([]int, n+1)
	prev := 4 * (1 + int(n))
	for i := 0; i < int(n); i++ {
		o := binary.BigEndian.Uint32(b[4*(i+1):])
		if uint64(o) > uint64(len(b)) || int(o) < prev {
			return nil, fmt.Errorf("%w: offset %d is %d (previous %d, size %d)", errMalformed, i, o, prev, len(b))
		}
		offsets[i] = int(o)
		prev = int(o)
	}
	offsets[n] = len(b)
	var buffers [][]byte
	for i := 1; i < int(n); i++ {
		buffers = append(buffers, b[offsets[i]:offsets[i+1]:offsets[i+1]])
	}
	return decodeLegacyJSON(b[offsets[0]:offsets[1]], buffers)
}
