package kernel

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
)

// delimiter separates the routing identities (or the iopub topic) from the
// signed parts of a message.
const delimiter = "<IDS|MSG>"

var (
	errBadSignature = errors.New("bad signature")
	errMalformed    = errors.New("malformed message")
)

// encode returns the frames of m as sent on a DEALER socket:
// delimiter, signature, header, parent_header, metadata, content, buffers.
// The signature is the lowercase hex HMAC-SHA256 with key over the four
// JSON parts; with an empty key the signature is empty, as Jupyter does.
// A zero parent header and nil metadata or content are written as {}.
func encode(key []byte, m *jupyter.Message) ([][]byte, error) {
	header, parent, metadata, content, err := m.Parts()
	if err != nil {
		return nil, err
	}
	parts := [4][]byte{header, parent, metadata, content}
	frames := make([][]byte, 0, 6+len(m.Buffers))
	frames = append(frames, []byte(delimiter), sign(key, parts[:]))
	frames = append(frames, parts[:]...)
	return append(frames, m.Buffers...), nil
}

// decode parses the frames of one message read from channel. Frames before
// the delimiter (identities, or the iopub topic) are ignored. It returns an
// error wrapping errBadSignature when the signature does not match key (not
// checked when key is empty) and errMalformed when the frames are not a
// Jupyter message. decode never panics, whatever the input.
func decode(key []byte, channel string, frames [][]byte) (*jupyter.Message, error) {
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], []byte(delimiter)) {
		i++
	}
	if len(frames)-i < 6 {
		return nil, fmt.Errorf("%w: %d frames, no delimiter or fewer than 5 parts after it", errMalformed, len(frames))
	}
	sig, parts := frames[i+1], frames[i+2:i+6]
	if len(key) > 0 && !verify(key, sig, parts) {
		return nil, errBadSignature
	}
	m := &jupyter.Message{Channel: channel}
	if err := json.Unmarshal(parts[0], &m.Header); err != nil {
		return nil, fmt.Errorf("%w: header: %v", errMalformed, err)
	}
	if err := json.Unmarshal(parts[1], &m.Parent); err != nil {
		return nil, fmt.Errorf("%w: parent_header: %v", errMalformed, err)
	}
	if !jupyter.LooksLikeObject(parts[2]) || !jupyter.LooksLikeObject(parts[3]) {
		return nil, fmt.Errorf("%w: metadata or content is not a JSON object", errMalformed)
	}
	m.Metadata, m.Content = parts[2], parts[3]
	if rest := frames[i+6:]; len(rest) > 0 {
		m.Buffers = rest
	}
	return m, nil
}

// sign returns the lowercase hex HMAC-SHA256 of parts, or an empty frame
// when key is empty.
func sign(key []byte, parts [][]byte) []byte {
	if len(key) == 0 {
		return []byte{}
	}
	sum := mac(key, parts)
	out := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(out, sum)
	return out
}

// verify checks sig against parts in constant time.
func verify(key, sig []byte, parts [][]byte) bool {
	want := make([]byte, hex.DecodedLen(len(sig)))
	if _, err := hex.Decode(want, sig); err != nil {
		return false
	}
	return hmac.Equal(want, mac(key, parts))
}

func mac(key []byte, parts [][]byte) []byte {
	h := hmac.New(sha256.New, key)
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}
