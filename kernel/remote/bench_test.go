package remote

import (
	"strings"
	"testing"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
)

// bigStream is an iopub stream message of about 8 MB of text full of
// escapes (newlines, quotes, tabs), as a chatty cell prints.
func bigStream(tb testing.TB) *jupyter.Message {
	text := strings.Repeat("line \"quoted\"\tand é\n", 8<<20/22)
	content, err := json.Marshal(map[string]string{"name": "stdout", "text": text})
	if err != nil {
		tb.Fatal(err)
	}
	h := jupyter.NewHeader("s", "m", "stream")
	return &jupyter.Message{Channel: "iopub", Header: h, Parent: h, Content: content}
}

func benchmarkDecode(b *testing.B, f framing) {
	m := bigStream(b)
	typ, frame, err := encodeFrame(f, m)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := decodeFrame(f, typ, frame); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeBigV1(b *testing.B)     { benchmarkDecode(b, v1Framing) }
func BenchmarkDecodeBigLegacy(b *testing.B) { benchmarkDecode(b, legacyFraming) }

func BenchmarkEncodeExecuteV1(b *testing.B) {
	h := jupyter.NewHeader("s", "m", "execute_request")
	m := &jupyter.Message{Channel: "shell", Header: h, Content: []byte(`{"code":"pass","silent":false}`)}
	for b.Loop() {
		encodeFrame(v1Framing, m)
	}
}

// BenchmarkPass measures one `pass` (execute_request to execute_reply and
// status idle) through a Jupyter Server on loopback.
func BenchmarkPass(b *testing.B) {
	for _, p := range []struct {
		name  string
		extra []string
	}{{"v1", nil}, {"legacy", []string{"--ServerApp.kernel_ws_protocol="}}} {
		b.Run(p.name, func(b *testing.B) {
			s := startJupyter(b, p.extra...)
			k, rec := startKernel(b, s, nil)
			execute(b, k, rec, "pass")
			for b.Loop() {
				execute(b, k, rec, "pass")
			}
		})
	}
}
