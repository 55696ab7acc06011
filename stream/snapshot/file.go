package snapshot

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// A snapshot file:
//
//	magic "AIODSNAP1\n"
//	header length (4 bytes, big-endian), header (JSON, an Info)
//	HMAC-SHA256 of the above (32 bytes): the header's own seal, so that
//	  listing the snapshots at start reads only headers
//	payload length (8 bytes), payload (dill's pickle of the namespace)
//	HMAC-SHA256 of everything before it (32 bytes)
//
// The key is aiod's alone (keyFile, 0600 in the state directory, which
// runtimes never see). A file whose seals do not verify is refused and
// never loaded: unpickling runs code.

var magic = []byte("AIODSNAP1\n")

const (
	macSize       = sha256.Size
	maxHeader     = 4 << 20
	keyFile       = "snapshot.key"
	keySize       = 32
	fileExtension = ".snap"
)

// ErrTampered says a snapshot file was changed after aiod wrote it (or
// was not written by this aiod): its seal does not verify.
var ErrTampered = errors.New("the snapshot file does not verify (changed on disk, or not written by this aiod); it was not loaded")

// loadKey reads the key in dir, making it (random, 0600) when there is none.
func loadKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, keyFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil && len(b) == keySize:
		if err := os.Chmod(path, 0o600); err != nil {
			return nil, err
		}
		return b, nil
	case err == nil:
		return nil, fmt.Errorf("%s: %d bytes, want %d; remove it to make a new key (existing snapshots will be refused)", path, len(b), keySize)
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	b = make([]byte, keySize)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	return b, f.Close()
}

func mac(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// writeFile writes a sealed snapshot atomically (a temporary file renamed).
func writeFile(key []byte, path string, info *Info, payload []byte) error {
	return writeFileFrom(key, path, info, bytes.NewReader(payload), int64(len(payload)))
}

// writeFileFrom writes a sealed snapshot whose payload is the n bytes src
// gives, streamed (a payload of hundreds of megabytes never sits in aiod's
// memory), atomically.
func writeFileFrom(key []byte, path string, info *Info, src io.Reader, n int64) error {
	head, err := json.Marshal(info)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	whole := hmac.New(sha256.New, key)
	w := bufio.NewWriterSize(io.MultiWriter(tmp, whole), 256<<10)
	pre := append(append([]byte(nil), magic...), binary.BigEndian.AppendUint32(nil, uint32(len(head)))...)
	w.Write(pre)
	w.Write(head)
	w.Write(mac(key, pre, head))
	w.Write(binary.BigEndian.AppendUint64(nil, uint64(n)))
	if got, err := io.CopyN(w, src, n); err != nil {
		tmp.Close()
		return fmt.Errorf("the payload ended at %d of %d bytes: %w", got, n, err)
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(whole.Sum(nil)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// readHeader reads and verifies a snapshot's header only.
func readHeader(key []byte, path string) (*Info, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	pre := make([]byte, len(magic)+4)
	if _, err := io.ReadFull(f, pre); err != nil || !bytes.Equal(pre[:len(magic)], magic) {
		return nil, 0, ErrTampered
	}
	n := binary.BigEndian.Uint32(pre[len(magic):])
	if n > maxHeader {
		return nil, 0, ErrTampered
	}
	rest := make([]byte, int(n)+macSize)
	if _, err := io.ReadFull(f, rest); err != nil {
		return nil, 0, ErrTampered
	}
	head, seal := rest[:n], rest[n:]
	if !hmac.Equal(seal, mac(key, pre, head)) {
		return nil, 0, ErrTampered
	}
	var info Info
	if err := json.Unmarshal(head, &info); err != nil {
		return nil, 0, ErrTampered
	}
	return &info, st.Size(), nil
}

// readFile reads and verifies a whole snapshot, no larger than limit
// bytes of payload; it returns nothing of a file that does not verify.
func readFile(key []byte, path string, limit int64) (*Info, []byte, error) {
	var b bytes.Buffer
	info, err := copyPayload(key, path, limit, &b)
	if err != nil {
		return nil, nil, err
	}
	return info, b.Bytes(), nil
}

// copyPayload verifies a snapshot of at most limit bytes of payload while
// it copies the payload to dst, streamed. Only a nil error says the
// payload verified: on any other, what dst got must be thrown away (a
// restore removes the file it wrote before anything reads it).
func copyPayload(key []byte, path string, limit int64, dst io.Writer) (*Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size > limit+maxHeader+int64(len(magic))+4+8+2*macSize {
		return nil, fmt.Errorf("the snapshot file is %d bytes, over the limit; it was not loaded", size)
	}
	if size < int64(len(magic))+4+2*macSize+8 {
		return nil, ErrTampered
	}
	whole := hmac.New(sha256.New, key)
	br := bufio.NewReaderSize(io.LimitReader(f, size), 256<<10)
	r := io.TeeReader(io.LimitReader(br, size-macSize), whole) // all the seal covers
	pre := make([]byte, len(magic)+4)
	if _, err := io.ReadFull(r, pre); err != nil || !bytes.Equal(pre[:len(magic)], magic) {
		return nil, ErrTampered
	}
	n := int64(binary.BigEndian.Uint32(pre[len(magic):]))
	if n > maxHeader || int64(len(pre))+n+macSize+8+macSize > size {
		return nil, ErrTampered
	}
	rest := make([]byte, n+macSize+8)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, ErrTampered
	}
	head := rest[:n]
	if !hmac.Equal(rest[n:n+macSize], mac(key, pre, head)) {
		return nil, ErrTampered
	}
	pn := binary.BigEndian.Uint64(rest[n+macSize:])
	if pn != uint64(size-int64(len(pre))-int64(len(rest))-macSize) {
		return nil, ErrTampered
	}
	if pn > uint64(limit) {
		return nil, fmt.Errorf("the snapshot holds %d bytes, over the limit %d (--snapshot-max-bytes); it was not loaded", pn, limit)
	}
	if _, err := io.CopyN(dst, r, int64(pn)); err != nil {
		return nil, fmt.Errorf("copy the snapshot's payload: %w", err)
	}
	sum := whole.Sum(nil)
	seal := make([]byte, macSize)
	if _, err := io.ReadFull(br, seal); err != nil || !hmac.Equal(seal, sum) {
		return nil, ErrTampered
	}
	var info Info
	if err := json.Unmarshal(head, &info); err != nil {
		return nil, ErrTampered
	}
	return &info, nil
}

// dirName is a name's folder: a hash, so that any session id makes a
// safe file name.
func dirName(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:12])
}

// newID is a snapshot id: time-ordered, then random.
func newID(now time.Time) string {
	r := make([]byte, 6)
	_, _ = rand.Read(r)
	return fmt.Sprintf("snap-%s-%x", now.UTC().Format("20060102T150405.000"), r)
}
