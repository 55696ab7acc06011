package execution

import (
	"bytes"
	"encoding/binary"
	"errors"

	bolt "go.etcd.io/bbolt"
)

// Large values of bucketX are kept in pieces. bbolt keeps at least two
// values in a leaf and writes a changed leaf whole, in a buffer of its
// size: each 8 MiB answer put beside earlier ones rewrote them too (18 MB
// of page buffers at once for four), and copied them out of the file's map
// when it grew. A value over chunkedOver is cut into chunkBytes pieces in
// bucketChunks, under its key and a four-byte index, and bucketX holds a
// stub: the value's head, recChunked and the value's length.
var bucketChunks = []byte("xc")

const (
	chunkedOver = 64 << 10
	chunkBytes  = 1920 // two to a 4 KiB page
	recChunked  = 0x02
)

// putValue puts v, the value of tenant's execution id, under k.
func putValue(tx *bolt.Tx, k, v []byte, tenant, id string) error {
	xb := tx.Bucket(bucketX)
	if len(v) <= chunkedOver {
		return xb.Put(k, v)
	}
	cb := tx.Bucket(bucketChunks)
	cb.FillPercent = 1 // keys grow with time: pieces are appended
	ck := make([]byte, len(k)+4)
	copy(ck, k)
	for i := 0; i*chunkBytes < len(v); i++ {
		binary.BigEndian.PutUint32(ck[len(k):], uint32(i))
		if err := cb.Put(ck, v[i*chunkBytes:min(len(v), (i+1)*chunkBytes)]); err != nil {
			return err
		}
	}
	stub := appendHead(nil, tenant, id)
	stub = append(stub, recChunked)
	return xb.Put(k, binary.AppendUvarint(stub, uint64(len(v))))
}

// appendHead appends a value's head: its tenant and id.
func appendHead(b []byte, tenant, id string) []byte {
	b = append(binary.AppendUvarint(b, uint64(len(tenant))), tenant...)
	return append(binary.AppendUvarint(b, uint64(len(id))), id...)
}

// chunkedLen is the length of the value v stands for when it is a stub,
// else 0.
func chunkedLen(v []byte) int {
	_, _, rest, err := splitHead(v)
	if err != nil || len(rest) < 2 || rest[0] != recChunked {
		return 0
	}
	n, k := binary.Uvarint(rest[1:])
	if k <= 0 || k != len(rest)-1 {
		return 0
	}
	return int(n)
}

// valueLen is the length of the value stored under a key of bucketX.
func valueLen(v []byte) int {
	if n := chunkedLen(v); n > 0 {
		return n
	}
	return len(v)
}

// getValue returns the value v (bucketX's, under k) stands for, copied out
// of the file's map.
func getValue(tx *bolt.Tx, k, v []byte) ([]byte, error) {
	n := chunkedLen(v)
	if n == 0 {
		return append([]byte(nil), v...), nil
	}
	out := make([]byte, 0, n)
	c := tx.Bucket(bucketChunks).Cursor()
	for ck, cv := c.Seek(k); ck != nil && len(ck) == len(k)+4 && bytes.HasPrefix(ck, k); ck, cv = c.Next() {
		out = append(out, cv...)
	}
	if len(out) != n {
		return nil, errors.New("bad record: pieces missing")
	}
	return out, nil
}

// deleteChunks deletes the pieces of the value under k, if it has any.
func deleteChunks(tx *bolt.Tx, k, v []byte) error {
	if chunkedLen(v) == 0 {
		return nil
	}
	c := tx.Bucket(bucketChunks).Cursor()
	for ck, _ := c.Seek(k); ck != nil && len(ck) == len(k)+4 && bytes.HasPrefix(ck, k); ck, _ = c.Seek(k) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}
