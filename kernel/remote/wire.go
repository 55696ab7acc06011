package remote

import (
	"fmt"

	"github.com/coder/websocket"

	"github.com/aiod/aiod/kernel/jupyter"
)

// SubprotocolV1 is the kernel WebSocket subprotocol aiod offers. When the
// server selects none, the channels socket speaks the legacy protocol.
const SubprotocolV1 = jupyter.SubprotocolV1

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

// errMalformed is wrapped by every decoding error.
var errMalformed = jupyter.ErrMalformed

// encodeFrame returns m as one WebSocket message in framing f.
func encodeFrame(f framing, m *jupyter.Message) (websocket.MessageType, []byte, error) {
	if f == v1Framing {
		b, err := jupyter.EncodeV1(m)
		return websocket.MessageBinary, b, err
	}
	b, bin, err := jupyter.EncodeLegacy(m)
	if bin {
		return websocket.MessageBinary, b, err
	}
	return websocket.MessageText, b, err
}

// decodeFrame parses one WebSocket message read in framing f. It never
// panics, whatever the input; errors wrap errMalformed.
func decodeFrame(f framing, typ websocket.MessageType, b []byte) (*jupyter.Message, error) {
	if f == v1Framing {
		if typ != websocket.MessageBinary {
			return nil, fmt.Errorf("%w: text frame on a %s socket", errMalformed, SubprotocolV1)
		}
		return jupyter.DecodeV1(b)
	}
	return jupyter.DecodeLegacy(b, typ == websocket.MessageBinary)
}
