package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/remote/remotetest"
)

func TestProbe(t *testing.T) {
	t.Parallel()
	s := startJupyter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := client(t, s).Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != "1.23.3" && !strings.HasPrefix(info.Version, "1.23") {
		t.Errorf("Version = %q, want 1.23.x", info.Version)
	}
	if info.DefaultKernel != "python3" || info.Endpoint != s.URL {
		t.Errorf("info = %+v", info)
	}
	var py *KernelSpec
	for i := range info.KernelSpecs {
		if info.KernelSpecs[i].Name == "python3" {
			py = &info.KernelSpecs[i]
		}
	}
	if py == nil || py.Language != "python" || py.DisplayName == "" || py.InterruptMode != "signal" {
		t.Errorf("kernelspecs = %+v", info.KernelSpecs)
	}

	// A wrong token: /api answers without auth, the kernelspecs do not.
	bad, err := NewClient(s.URL+"/", "wrong")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bad.CloseIdleConnections)
	_, err = bad.Probe(ctx)
	if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "AIO_JUPYTER_TOKEN") {
		t.Errorf("Probe with a wrong token: %v", err)
	}
	var he *HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusForbidden {
		t.Errorf("Probe with a wrong token: %v is not an *HTTPError 403", err)
	}
	t.Logf("wrong token: %v", err)
}

func TestProbeClosedPort(t *testing.T) {
	t.Parallel()
	endpoint := fmt.Sprintf("http://127.0.0.1:%d/base", remotetest.ClosedPort(t))
	c, err := NewClient(endpoint, "tok", WithProbeTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Probe(context.Background())
	if err == nil {
		t.Fatal("Probe of a closed port succeeded")
	}
	// Refused, not timed out: the probe did not wait for its deadline.
	want := "probe jupyter server " + endpoint + ": GET /api: "
	if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("err = %q, want %q... connection refused", err, want)
	}
	t.Logf("closed port: %v", err)

	// A server that accepts connections and never answers: the deadline.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	c, _ = NewClient("http://"+l.Addr().String(), "", WithProbeTimeout(300*time.Millisecond))
	_, err = c.Probe(context.Background())
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Errorf("unanswered probe: %v", err)
	}
	t.Logf("unanswered: %v", err)
	c.CloseIdleConnections()
	l.Close()
	for c := range accepted {
		c.Close()
	}
}

func TestNewClient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "http://h:8888", want: "http://h:8888"},
		{in: "https://h/base/", want: "https://h/base"},
		{in: " http://h:1/a/b ", want: "http://h:1/a/b"},
		{in: "http://u:secret@h:1", want: "http://u:xxxxx@h:1"},
		{in: "ws://h:1", err: "scheme must be http or https"},
		{in: "h:8888", err: "scheme must be http or https"},
		{in: "http://", err: "no host"},
		{in: "http://h/?token=x", err: "no query"},
	} {
		c, err := NewClient(tc.in, "")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("NewClient(%q) = %v, want error %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("NewClient(%q): %v", tc.in, err)
			continue
		}
		if got := c.Endpoint(); got != tc.want {
			t.Errorf("NewClient(%q).Endpoint() = %q, want %q", tc.in, got, tc.want)
		}
	}
	c, _ := NewClient("https://h:1/base/", "")
	if got := c.url(kernelPath("abc-1", "/channels"), true); got != "wss://h:1/base/api/kernels/abc-1/channels" {
		t.Errorf("channels URL = %q", got)
	}
	if got := kernelPath("../../api/shutdown", ""); got != "/api/kernels/invalid-kernel-id" {
		t.Errorf("kernelPath of a bad id = %q", got)
	}
}
