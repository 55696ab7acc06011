package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSecurityOptions: the JWT key and the ticket TTL come from their flag,
// else their AIO_* variable, else the AIO sandbox's names (JWT_PUBLIC_KEY,
// TICKET_TTL_SECONDS); --allowed-hosts is a comma-separated list.
func TestSecurityOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		key  string
		ttl  time.Duration
	}{
		{"defaults", nil, nil, "", 30 * time.Second},
		{"AIO sandbox names", nil, map[string]string{"JWT_PUBLIC_KEY": "k1", "TICKET_TTL_SECONDS": "5"}, "k1", 5 * time.Second},
		{"AIO_* wins", nil, map[string]string{"JWT_PUBLIC_KEY": "k1", "AIO_JWT_PUBLIC_KEY": "k2", "TICKET_TTL_SECONDS": "5", "AIO_TICKET_TTL_SECONDS": "7"}, "k2", 7 * time.Second},
		{"flag wins", []string{"--jwt-public-key", "k3", "--ticket-ttl", "2.5"}, map[string]string{"AIO_JWT_PUBLIC_KEY": "k2", "TICKET_TTL_SECONDS": "5"}, "k3", 2500 * time.Millisecond},
	} {
		o, err := parseOptions(tc.args, fakeLookup(tc.env), io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if o.jwtPublicKey != tc.key || o.ticketTTL != tc.ttl {
			t.Errorf("%s: key %q ttl %v, want %q %v", tc.name, o.jwtPublicKey, o.ticketTTL, tc.key, tc.ttl)
		}
	}
	_, err := parseOptions(nil, fakeLookup(map[string]string{"TICKET_TTL_SECONDS": "soon"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "TICKET_TTL_SECONDS") {
		t.Errorf("a bad TICKET_TTL_SECONDS: %v, want an error naming it", err)
	}
	o, err := parseOptions([]string{"--allowed-hosts", " aiod.internal, *.lab.example ,", "--allowed-origins", "https://app.example"}, fakeLookup(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.gatewayConfig(nil)
	if strings.Join(cfg.AllowedHosts, "|") != "aiod.internal|*.lab.example" || strings.Join(cfg.AllowedOrigins, "|") != "https://app.example" || cfg.TicketTTL != 30*time.Second {
		t.Errorf("gateway config: hosts %q origins %q ttl %v", cfg.AllowedHosts, cfg.AllowedOrigins, cfg.TicketTTL)
	}
}

// TestBadSecurityFlagsFail: a key that cannot be read, or an allowed host
// with a port, stops the daemon with an error naming the flag.
func TestBadSecurityFlagsFail(t *testing.T) {
	for _, args := range [][]string{
		{"--jwt-public-key", "not a key"},
		{"--allowed-hosts", "aiod.internal:8080"},
		{"--allowed-origins", "https://app.example/path"},
	} {
		cmd := exec.Command(daemonBin, append([]string{"--addr", "127.0.0.1:0"}, args...)...)
		cmd.Env = cleanEnv()
		out, err := runBounded(t, cmd, 30*time.Second)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() <= 0 || !strings.Contains(string(out), args[0]) {
			t.Errorf("aiod %s: err %v, want a non-zero exit naming %s; output:\n%s", strings.Join(args, " "), err, args[0], out)
		}
	}
}

// TestWarnsOffLoopback: on 0.0.0.0 with no credentials the daemon warns at
// start, naming the risk and the flags, and answers the machine's own name
// as Host; with --token it does not warn.
func TestWarnsOffLoopback(t *testing.T) {
	name, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, withToken := range []bool{false, true} {
		port := freePort(t)
		args := []string{"--addr", fmt.Sprintf("0.0.0.0:%d", port)}
		if withToken {
			args = append(args, "--token", "s3cret")
		}
		cmd := exec.Command(daemonBin, args...)
		cmd.Env = cleanEnv()
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		stop := func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		get := func(host string) int {
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/healthz", port), nil)
			req.Host = host
			resp, err := c.Do(req)
			if err != nil {
				return 0
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		deadline := time.Now().Add(60 * time.Second)
		for get(fmt.Sprintf("127.0.0.1:%d", port)) != 200 {
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("aiod on 0.0.0.0:%d not healthy in 60 s:\n%s", port, out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		if st := get(fmt.Sprintf("%s:%d", name, port)); st != 200 {
			t.Errorf("Host %s (the machine's name): %d", name, st)
		}
		if st := get("evil.example"); st != 403 {
			t.Errorf("Host evil.example: %d", st)
		}
		stop()
		log := out.String()
		warned := strings.Contains(log, "level=WARN") && strings.Contains(log, "requires no credentials") &&
			strings.Contains(log, "--token") && strings.Contains(log, "--jwt-public-key")
		if warned == withToken {
			t.Errorf("token %v: warned %v; log:\n%s", withToken, warned, log)
		}
		if !strings.Contains(log, "request refused") || !strings.Contains(log, "evil.example") {
			t.Errorf("the refused Host is not logged:\n%s", log)
		}
	}
}

// runBounded runs cmd to its end, killing it after d.
func runBounded(t *testing.T, cmd *exec.Cmd, d time.Duration) ([]byte, error) {
	t.Helper()
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return []byte(out.String()), err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s still running after %s; output:\n%s", strings.Join(cmd.Args, " "), d, out.String())
		return nil, nil
	}
}
