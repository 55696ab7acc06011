package api

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// A streamed answer whose client stops reading ends once a write has
// waited its timeout: the stream writer returns (it used to block for as
// long as the client kept the connection), over real HTTP on loopback.
func TestStreamToAClientThatStopsReadingEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		conn := ctx.Conn()
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			line := strings.Repeat("x", 64<<10) + "\n"
			for {
				Arm(conn, 200*time.Millisecond)
				_, _ = w.WriteString(line)
				if err := Flush(conn, w, 200*time.Millisecond); err != nil {
					ended <- err
					return
				}
			}
		})
	}}
	go srv.Serve(ln) //nolint:errcheck // ends with Shutdown
	defer srv.Shutdown()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	select {
	case err := <-ended:
		t.Logf("the stream ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the stream to a client that stopped reading still writes after 30 s")
	}
}
