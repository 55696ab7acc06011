package jupyter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/goccy/go-json"
)

// The two framings of Jupyter Server's kernel WebSocket,
// /api/kernels/{id}/channels; aiod serves both and speaks both as a client.
//
// Legacy (no subprotocol): one JSON text message per Jupyter message,
// {"channel","header","parent_header","metadata","content","buffers":[]};
// a message with binary buffers travels as a binary message instead: u32
// big-endian count n, n u32 big-endian offsets, the JSON at the first
// offset, then each buffer.
//
// SubprotocolV1: every message binary: u64 little-endian count n, n u64
// little-endian offsets, then channel, header, parent_header, metadata,
// content and the buffers; offsets[0] is where the channel starts and
// offsets[i+1] where part i ends.

// SubprotocolV1 is the kernel WebSocket subprotocol of Jupyter Server 2.
const SubprotocolV1 = "v1.kernel.websocket.jupyter.org"

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("malformed kernel WebSocket message")

// legacyMessage is a message in the legacy JSON framing. msg_id and
// msg_type repeat the header's, as Jupyter Server writes them.
type legacyMessage struct {
	Channel  string          `json:"channel"`
	Header   json.RawMessage `json:"header"`
	Parent   json.RawMessage `json:"parent_header"`
	Metadata json.RawMessage `json:"metadata"`
	Content  json.RawMessage `json:"content"`
	Buffers  []any           `json:"buffers"` // always empty: buffers travel in binary frames
	MsgID    string          `json:"msg_id,omitempty"`
	MsgType  string          `json:"msg_type,omitempty"`
}

// EncodeLegacy returns m in the legacy framing: JSON text (binary false),
// or a binary message when m carries buffers.
func EncodeLegacy(m *Message) (b []byte, binaryMsg bool, err error) {
	header, parent, metadata, content, err := m.Parts()
	if err != nil {
		return nil, false, err
	}
	js, err := json.MarshalWithOption(&legacyMessage{
		Channel: m.Channel, Header: header, Parent: parent, Metadata: metadata, Content: content,
		Buffers: []any{}, MsgID: m.Header.MsgID, MsgType: m.Header.MsgType,
	}, json.DisableHTMLEscape())
	if err != nil {
		return nil, false, fmt.Errorf("encode %s: %w", m.Header.MsgType, err)
	}
	if len(m.Buffers) == 0 {
		return js, false, nil
	}
	parts := append([][]byte{js}, m.Buffers...)
	start := 4 * (1 + len(parts))
	size := start
	for _, p := range parts {
		size += len(p)
	}
	if size > math.MaxUint32 {
		return nil, false, fmt.Errorf("encode %s: %d bytes do not fit the legacy binary framing", m.Header.MsgType, size)
	}
	b = make([]byte, start, size)
	binary.BigEndian.PutUint32(b, uint32(len(parts)))
	off := start
	for i, p := range parts {
		binary.BigEndian.PutUint32(b[4*(i+1):], uint32(off))
		off += len(p)
	}
	for _, p := range parts {
		b = append(b, p...)
	}
	return b, true, nil
}

// DecodeLegacy parses one legacy message: JSON text, or binary (with
// buffers) when binaryMsg is set. A message without a channel is shell's. It never panics, whatever the input;
// errors wrap ErrMalformed. The message refers to b's memory.
func DecodeLegacy(b []byte, binaryMsg bool) (*Message, error) {
	if binaryMsg {
		return decodeLegacyBinary(b)
	}
	return decodeLegacyJSON(b, nil)
}

func decodeLegacyJSON(b []byte, buffers [][]byte) (*Message, error) {
	var lm legacyMessage
	if err := json.Unmarshal(b, &lm); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if lm.Channel == "" {
		// jupyter_server 1.23's gateway client sends no channel; Jupyter
		// Server takes such a message as shell's.
		lm.Channel = Shell
	}
	m := &Message{Channel: lm.Channel}
	if len(lm.Parent) == 0 || bytes.Equal(lm.Parent, []byte("null")) {
		lm.Parent = emptyObject
	}
	if len(lm.Metadata) == 0 || bytes.Equal(lm.Metadata, []byte("null")) {
		lm.Metadata = emptyObject
	}
	if len(lm.Content) == 0 {
		lm.Content = emptyObject
	}
	if err := decodeParts(m, lm.Header, lm.Parent, lm.Metadata, lm.Content); err != nil {
		return nil, err
	}
	m.Buffers = buffers
	return m, nil
}

// decodeLegacyBinary parses a legacy binary frame: u32be count n, n u32be
// offsets (the first part being the JSON message), then the parts.
func decodeLegacyBinary(b []byte) (*Message, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the part count", ErrMalformed, len(b))
	}
	n := binary.BigEndian.Uint32(b)
	if n < 1 || uint64(n) > uint64(len(b)-4)/4 {
		return nil, fmt.Errorf("%w: part count %d for %d bytes", ErrMalformed, n, len(b))
	}
	offsets := make([]int, n+1)
	prev := 4 * (1 + int(n))
	for i := 0; i < int(n); i++ {
		o := binary.BigEndian.Uint32(b[4*(i+1):])
		if uint64(o) > uint64(len(b)) || int(o) < prev {
			return nil, fmt.Errorf("%w: offset %d is %d (previous %d, size %d)", ErrMalformed, i, o, prev, len(b))
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

// EncodeV1 returns m in the SubprotocolV1 framing.
func EncodeV1(m *Message) ([]byte, error) {
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

// DecodeV1 parses a message in the SubprotocolV1 framing. Bytes after the
// last offset are ignored, as Jupyter Server does. It never panics; errors
// wrap ErrMalformed. The message refers to b's memory.
func DecodeV1(b []byte) (*Message, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the offset count", ErrMalformed, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	// channel start, then the ends of channel and the four JSON parts.
	if n < 6 || n > uint64(len(b)-8)/8 {
		return nil, fmt.Errorf("%w: offset count %d for %d bytes", ErrMalformed, n, len(b))
	}
	offsets := make([]int, n)
	prev := 8 * (1 + int(n))
	for i := range offsets {
		o := binary.LittleEndian.Uint64(b[8*(i+1):])
		if o > uint64(len(b)) || o < uint64(prev) {
			return nil, fmt.Errorf("%w: offset %d is %d (previous %d, size %d)", ErrMalformed, i, o, prev, len(b))
		}
		offsets[i] = int(o)
		prev = int(o)
	}
	part := func(i int) []byte { return b[offsets[i]:offsets[i+1]:offsets[i+1]] }
	channel := part(0)
	if len(channel) == 0 {
		return nil, fmt.Errorf("%w: empty channel", ErrMalformed)
	}
	m := &Message{Channel: string(channel)}
	if err := decodeParts(m, part(1), part(2), part(3), part(4)); err != nil {
		return nil, err
	}
	for i := 5; i < len(offsets)-1; i++ {
		m.Buffers = append(m.Buffers, part(i))
	}
	return m, nil
}

// BadMessageError is the error of a message whose header could be read
// but whose other parts could not: Channel and Header say what it was, so
// that whoever received it can answer it. It wraps ErrMalformed.
type BadMessageError struct {
	Channel string
	Header  Header
	Reason  string
}

func (e *BadMessageError) Error() string { return ErrMalformed.Error() + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrMalformed) hold.
func (e *BadMessageError) Unwrap() error { return ErrMalformed }

// decodeParts fills m from the four JSON parts.
func decodeParts(m *Message, header, parent, metadata, content []byte) error {
	if err := decodeHeader(header, &m.Header); err != nil {
		return fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	if err := decodeHeader(parent, &m.Parent); err != nil {
		return &BadMessageError{Channel: m.Channel, Header: m.Header, Reason: "parent_header: " + err.Error()}
	}
	if !LooksLikeObject(metadata) || !LooksLikeObject(content) {
		return &BadMessageError{Channel: m.Channel, Header: m.Header, Reason: "metadata or content is not a JSON object"}
	}
	m.Metadata, m.Content = metadata, content
	return nil
}

// looseHeader is a header whose date may be any JSON value.
type looseHeader struct {
	MsgID    string          `json:"msg_id"`
	Session  string          `json:"session"`
	Username string          `json:"username"`
	Date     json.RawMessage `json:"date"`
	MsgType  string          `json:"msg_type"`
	Version  string          `json:"version"`
}

// decodeHeader decodes a header (or parent_header). Clients disagree on
// the date: Jupyter Server passes any JSON there on, and jupyter_server
// 1.23's gateway client sends a float Unix timestamp. A string is kept, a
// number becomes DateFormat, null or a missing date is "". Any other field
// must be a string.
func decodeHeader(b []byte, h *Header) error {
	err := json.Unmarshal(b, h)
	if err == nil {
		return nil
	}
	var lh looseHeader
	if json.Unmarshal(b, &lh) != nil {
		return err
	}
	*h = Header{MsgID: lh.MsgID, Session: lh.Session, Username: lh.Username, MsgType: lh.MsgType, Version: lh.Version}
	d := bytes.TrimSpace(lh.Date)
	switch {
	case len(d) == 0 || bytes.Equal(d, []byte("null")):
	case d[0] == '"':
		if err := json.Unmarshal(d, &h.Date); err != nil {
			return fmt.Errorf("date: %v", err)
		}
	default:
		var secs float64
		if err := json.Unmarshal(d, &secs); err != nil || math.IsInf(secs, 0) || math.IsNaN(secs) || math.Abs(secs) > 1e11 {
			return fmt.Errorf("date must be a string, a number of seconds since 1970 or null, got %.40s", d)
		}
		whole, frac := math.Modf(secs)
		h.Date = FormatDate(time.Unix(int64(whole), int64(frac*1e9)))
	}
	return nil
}
