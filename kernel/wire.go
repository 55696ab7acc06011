package kernel

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"sync"

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
func encode(key *signer, m *jupyter.Message) ([][]byte, error) {
	header, parent, metadata, content, err := m.Parts()
	if err != nil {
		return nil, err
	}
	parts := [4][]byte{header, parent, metadata, content}
	frames := make([][]byte, 0, 6+len(m.Buffers))
	frames = append(frames, []byte(delimiter), key.sign(parts[:]))
	frames = append(frames, parts[:]...)
	return append(frames, m.Buffers...), nil
}

// decode parses the frames of one message read from channel. Frames before
// the delimiter (identities, or the iopub topic) are ignored. It returns an
// error wrapping errBadSignature when the signature does not match key (not
// checked when key is empty) and errMalformed when the frames are not a
// Jupyter message. decode never panics, whatever the input.
func decode(key *signer, channel string, frames [][]byte) (*jupyter.Message, error) {
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], []byte(delimiter)) {
		i++
	}
	if len(frames)-i < 6 {
		return nil, fmt.Errorf("%w: %d frames, no delimiter or fewer than 5 parts after it", errMalformed, len(frames))
	}
	sig, parts := frames[i+1], frames[i+2:i+6]
	if !key.verify(sig, parts) {
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

// signer signs and checks messages with one connection's key. Its HMAC
// states are kept for reuse: a fresh one hashes the key again and
// allocates, for every message of every kernel.
type signer struct {
	key  []byte
	macs sync.Pool // of hash.Hash, keyed with key
}

func newSigner(key []byte) *signer {
	s := &signer{key: key}
	s.macs.New = func() any { return hmac.New(sha256.New, key) }
	return s
}

// sign returns the lowercase hex HMAC-SHA256 of parts, or an empty frame
// when the key is empty.
func (s *signer) sign(parts [][]byte) []byte {
	if len(s.key) == 0 {
		return []byte{}
	}
	var buf [sha256.Size]byte
	sum := s.mac(buf[:0], parts)
	out := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(out, sum)
	return out
}

// verify checks sig against parts in constant time; with an empty key
// every signature passes, as Jupyter does.
func (s *signer) verify(sig []byte, parts [][]byte) bool {
	if len(s.key) == 0 {
		return true
	}
	var want, sum [sha256.Size]byte
	if hex.DecodedLen(len(sig)) != len(want) {
		return false
	}
	if _, err := hex.Decode(want[:], sig); err != nil {
		return false
	}
	return hmac.Equal(want[:], s.mac(sum[:0], parts))
}

// mac appends the HMAC of parts to dst.
func (s *signer) mac(dst []byte, parts [][]byte) []byte {
	h := s.macs.Get().(hash.Hash)
	h.Reset()
	for _, p := range parts {
		h.Write(p)
	}
	dst = h.Sum(dst)
	s.macs.Put(h)
	return dst
}
