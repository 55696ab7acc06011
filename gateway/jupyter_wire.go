package gateway

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/aiod/aiod/kernel"
	"github.com/goccy/go-json"
)

// The two framings of Jupyter's kernel WebSocket, /api/kernels/{id}/channels.
//
// Legacy (no subprotocol): a JSON text message
// {"channel","header","parent_header","metadata","content","buffers":[]};
// a message with binary buffers is a binary message: u32 big-endian count
// n, n u32 big-endian offsets, the JSON at the first offset, then each
// buffer.
//
// v1.kernel.websocket.jupyter.org: every message binary: u64 little-endian
// count n, n u64 little-endian offsets, then channel, header,
// parent_header, metadata, content and the buffers, each starting at its
// offset; the last offset is the end of the message.

const jupyterV1 = "v1.kernel.websocket.jupyter.org"

var errJupyterFrame = errors.New("malformed kernel WebSocket message")

// wireHeader is the header as sent: a parent_header with no msg_id is {}.
func jHeaderJSON(h kernel.Header) []byte {
	if h.MsgID == "" && h.MsgType == "" {
		return []byte("{}")
	}
	b, _ := json.Marshal(h)
	return b
}

func jOrObject(b json.RawMessage) []byte {
	if len(bytes.TrimSpace(b)) == 0 {
		return []byte("{}")
	}
	return b
}

type jLegacyMsg struct {
	Channel  string          `json:"channel"`
	Header   json.RawMessage `json:"header"`
	Parent   json.RawMessage `json:"parent_header"`
	Metadata json.RawMessage `json:"metadata"`
	Content  json.RawMessage `json:"content"`
	Buffers  []any           `json:"buffers"`
	MsgID    string          `json:"msg_id,omitempty"`
	MsgType  string          `json:"msg_type,omitempty"`
}

// encodeJupyterLegacy renders m in the legacy framing; binary is true when it
// carries buffers.
func encodeJupyterLegacy(m *kernel.Message) (b []byte, binaryMsg bool, err error) {
	lm := jLegacyMsg{
		Channel: m.Channel, Header: jHeaderJSON(m.Header), Parent: jHeaderJSON(m.Parent),
		Metadata: jOrObject(m.Metadata), Content: jOrObject(m.Content), Buffers: []any{},
		MsgID: m.Header.MsgID, MsgType: m.Header.MsgType,
	}
	js, err := json.MarshalNoEscape(lm)
	if err != nil || len(m.Buffers) == 0 {
		return js, false, err
	}
	n := 1 + len(m.Buffers)
	out := make([]byte, 4*(n+1), 4*(n+1)+len(js)+jBufLen(m.Buffers))
	binary.BigEndian.PutUint32(out, uint32(n))
	off := 4 * (n + 1)
	parts := append([][]byte{js}, m.Buffers...)
	for i, p := range parts {
		binary.BigEndian.PutUint32(out[4*(i+1):], uint32(off))
		off += len(p)
	}
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, true, nil
}

func jBufLen(bs [][]byte) int {
	n := 0
	for _, b := range bs {
		n += len(b)
	}
	return n
}

// decodeJupyterLegacy reads a legacy text (JSON) or binary (with buffers) message.
func decodeJupyterLegacy(b []byte, binaryMsg bool) (*kernel.Message, error) {
	var bufs [][]byte
	if binaryMsg {
		if len(b) < 8 {
			return nil, errJupyterFrame
		}
		n := int(binary.BigEndian.Uint32(b))
		if n < 1 || n > 1<<16 || len(b) < 4*(n+1) {
			return nil, errJupyterFrame
		}
		offs := make([]int, n+1)
		for i := 0; i < n; i++ {
			offs[i] = int(binary.BigEndian.Uint32(b[4*(i+1):]))
		}
		offs[n] = len(b)
		for i := 0; i < n; i++ {
			if offs[i] < 4*(n+1) || offs[i] > offs[i+1] || offs[i+1] > len(b) {
				return nil, errJupyterFrame
			}
		}
		js := b[offs[0]:offs[1]]
		for i := 1; i < n; i++ {
			bufs = append(bufs, bytes.Clone(b[offs[i]:offs[i+1]]))
		}
		b = js
	}
	var lm jLegacyMsg
	if err := json.Unmarshal(b, &lm); err != nil {
		return nil, fmt.Errorf("%w: %v", errJupyterFrame, err)
	}
	m, err := jBuildMsg(lm.Channel, lm.Header, lm.Parent, lm.Metadata, lm.Content)
	if err != nil {
		return nil, err
	}
	m.Buffers = bufs
	return m, nil
}

func jBuildMsg(channel string, header, parent, metadata, content []byte) (*kernel.Message, error) {
	m := &kernel.Message{Channel: channel}
	if err := json.Unmarshal(header, &m.Header); err != nil || m.Header.MsgType == "" {
		return nil, fmt.Errorf("%w: header must be an object with msg_type", errJupyterFrame)
	}
	if len(bytes.TrimSpace(parent)) > 0 && !bytes.Equal(bytes.TrimSpace(parent), []byte("null")) {
		if err := json.Unmarshal(parent, &m.Parent); err != nil {
			return nil, fmt.Errorf("%w: parent_header must be an object", errJupyterFrame)
		}
	}
	m.Metadata = json.RawMessage(bytes.Clone(jOrObject(metadata)))
	m.Content = json.RawMessage(bytes.Clone(jOrObject(content)))
	if bytes.Equal(bytes.TrimSpace(m.Metadata), []byte("null")) {
		m.Metadata = json.RawMessage("{}")
	}
	return m, nil
}

// encodeJupyterV1 renders m in the v1.kernel.websocket.jupyter.org framing.
func encodeJupyterV1(m *kernel.Message) []byte {
	parts := [][]byte{[]byte(m.Channel), jHeaderJSON(m.Header), jHeaderJSON(m.Parent), jOrObject(m.Metadata), jOrObject(m.Content)}
	parts = append(parts, m.Buffers...)
	n := len(parts) + 1
	head := 8 * (n + 1)
	size := head
	for _, p := range parts {
		size += len(p)
	}
	out := make([]byte, head, size)
	binary.LittleEndian.PutUint64(out, uint64(n))
	off := head
	for i, p := range parts {
		binary.LittleEndian.PutUint64(out[8*(i+1):], uint64(off))
		off += len(p)
	}
	binary.LittleEndian.PutUint64(out[8*n:], uint64(off))
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// decodeJupyterV1 reads a v1.kernel.websocket.jupyter.org message.
func decodeJupyterV1(b []byte) (*kernel.Message, error) {
	if len(b) < 8 {
		return nil, errJupyterFrame
	}
	n64 := binary.LittleEndian.Uint64(b)
	if n64 < 6 || n64 > 1<<16 || uint64(len(b)) < 8*(n64+1) {
		return nil, errJupyterFrame
	}
	n := int(n64)
	offs := make([]int, n)
	for i := range offs {
		o := binary.LittleEndian.Uint64(b[8*(i+1):])
		if o > uint64(len(b)) {
			return nil, errJupyterFrame
		}
		offs[i] = int(o)
	}
	for i := 0; i+1 < n; i++ {
		if offs[i] < 8*(n+1) || offs[i] > offs[i+1] {
			return nil, errJupyterFrame
		}
	}
	part := func(i int) []byte { return b[offs[i]:offs[i+1]] }
	m, err := jBuildMsg(string(part(0)), part(1), part(2), part(3), part(4))
	if err != nil {
		return nil, err
	}
	for i := 5; i+1 < n; i++ {
		m.Buffers = append(m.Buffers, bytes.Clone(part(i)))
	}
	return m, nil
}
