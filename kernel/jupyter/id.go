package jupyter

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// DateFormat is how message headers carry their date, and how Jupyter
// Server formats a kernel's last_activity: RFC 3339 in UTC with
// microseconds.
const DateFormat = "2006-01-02T15:04:05.000000Z"

// Username is the username aiod puts in the headers it writes.
const Username = "aiod"

// FormatDate renders t in DateFormat, in UTC.
func FormatDate(t time.Time) string { return t.UTC().Format(DateFormat) }

// NewID returns a random UUID (version 4) string: aiod's id maker, for
// msg_ids, client sessions, session and kernel ids.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	return formatUUID(b)
}

// NewTimeID returns a UUID of version 7: the time in milliseconds in its
// first 48 bits, then 74 random ones. Ids made later sort later, so an
// index keyed by them (the execution store's) grows at its end instead of
// rewriting pages all over at every commit.
func NewTimeID() string {
	var b [16]byte
	_, _ = rand.Read(b[6:])
	ms := uint64(time.Now().UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = b[6]&0x0f | 0x70
	return formatUUID(b)
}

// formatUUID sets b's variant and writes it as a UUID string.
func formatUUID(b [16]byte) string {
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}

// NewHeader returns a header for a new message of type msgType in client
// session, dated now.
func NewHeader(session, msgID, msgType string) Header {
	return Header{
		MsgID:    msgID,
		Session:  session,
		Username: Username,
		Date:     FormatDate(time.Now()),
		MsgType:  msgType,
		Version:  ProtocolVersion,
	}
}

// NewMessage returns a message of msgType on channel in client session,
// with a fresh msg_id and the given content (nil is {}).
func NewMessage(channel, session, msgType string, content []byte) *Message {
	return &Message{Channel: channel, Header: NewHeader(session, NewID(), msgType), Content: content}
}
