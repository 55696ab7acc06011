package remote

import (
	"net/http"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/remote/remotetest"
)

type jupyterServer = remotetest.Server

func startJupyter(t testing.TB, extra ...string) *jupyterServer { return remotetest.Start(t, extra...) }

// client returns a Client for the server whose idle connections are closed
// at cleanup.
func client(t testing.TB, s *jupyterServer) *Client {
	t.Helper()
	// A probe's default 10 s was once not enough for a Jupyter Server on
	// a machine loaded far past its two cores.
	c, err := NewClient(s.URL, s.Token, WithProbeTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c.hc = &http.Client{Transport: &outageTransport{next: c.hc.Transport}} // for DropConnection
	t.Cleanup(c.CloseIdleConnections)
	return c
}
