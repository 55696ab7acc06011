package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestSecurityOptions: the JWT key and the ticket TTL come from their flag,
// else their AIO_* variable, else the AIO sandbox's names (JWT_PUBLIC_KEY,
// TICKET_TTL_SECONDS); --allowed-hosts is a comma-separated list.
func TestSecurityOptions(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	for _, args := range [][]string{
		{"--jwt-public-key", "not a key"},
		{"--allowed-hosts", "aiod.internal:8080"},
		{"--allowed-origins", "https://app.example/path"},
	} {
		cmd := exec.Command(daemonBin, append([]string{"--addr", "127.0.0.1:0"}, args...)...)
		cmd.Env = ownEnv(t)
		out, err := runBounded(t, cmd, 30*time.Second)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() <= 0 || !strings.Contains(string(out), args[0]) {
			t.Errorf("aiod %s: err %v, want a non-zero exit naming %s; output:\n%s", strings.Join(args, " "), err, args[0], out)
		}
	}
}

// TestWarnsOffLoopback: on 0.0.0.0 with no credentials the daemon warns at
// start, naming the risk and the flags, and answers the machine's own name
// as Host; with a token (AIO_TOKEN) it does not warn.
func TestWarnsOffLoopback(t *testing.T) {
	t.Parallel()
	name, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, withToken := range []bool{false, true} {
		sock, addr := boundSocket(t, "0.0.0.0:0")
		port := addr[strings.LastIndexByte(addr, ':')+1:]
		cmd := activated(daemonBin, sock)
		cmd.Env = append(ownEnv(t), "LISTEN_FDS=1")
		if withToken {
			cmd.Env = append(cmd.Env, "AIO_TOKEN=s3cret")
		}
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Start()
		sock.Close()
		if err != nil {
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
			req, _ := http.NewRequest("GET", "http://127.0.0.1:"+port+"/healthz", nil)
			req.Host = host
			resp, err := c.Do(req)
			if err != nil {
				return 0
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		deadline := time.Now().Add(60 * time.Second)
		for get("127.0.0.1:"+port) != 200 {
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("aiod on 0.0.0.0:%s not healthy in 60 s:\n%s", port, out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		if st := get(name + ":" + port); st != 200 {
			t.Errorf("Host %s (the machine's name): %d", name, st)
		}
		if st := get("evil.example"); st != 403 {
			t.Errorf("Host evil.example: %d", st)
		}
		stop()
		log := out.String()
		warned := strings.Contains(log, "level=WARN") && strings.Contains(log, "requires no credentials") &&
			strings.Contains(log, "AIO_TOKEN") && strings.Contains(log, "--jwt-public-key")
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

// TestSecretsNeverOnTheCommandLine: /proc/PID/cmdline is readable by every
// local user, so a token given as a flag value stops the daemon (exit 2,
// one line naming the variable and the file flag, never the value); the
// variables and the file flags work, and the secret is not on the running
// daemon's command line.
func TestSecretsNeverOnTheCommandLine(t *testing.T) {
	t.Parallel()
	const secret = "cmdline-s3cret"
	dir := t.TempDir()
	tokFile, empty := filepath.Join(dir, "token"), filepath.Join(dir, "empty")
	if err := os.WriteFile(tokFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"--token VALUE", nil, []string{"--token", secret}, []string{"--token:", "AIO_TOKEN", "--token-file"}},
		{"--token=VALUE", nil, []string{"--token=" + secret}, []string{"--token:", "AIO_TOKEN", "--token-file"}},
		{"--jupyter-token VALUE", nil, []string{"--jupyter-token", secret}, []string{"--jupyter-token:", "AIO_JUPYTER_TOKEN", "--jupyter-token-file"}},
		{"unreadable token file", nil, []string{"--token-file", filepath.Join(dir, "missing")}, []string{"--token-file", "missing", "no such file"}},
		{"empty token file", nil, []string{"--token-file", empty}, []string{"--token-file", empty, "empty"}},
		{"empty file from the variable", []string{"AIO_JUPYTER_TOKEN_FILE=" + empty}, nil, []string{"AIO_JUPYTER_TOKEN_FILE", "empty"}},
		{"variable and file", []string{"AIO_TOKEN=x"}, []string{"--token-file", tokFile}, []string{"--token-file", "AIO_TOKEN", "give one"}},
		{"key flag and key file", nil, []string{"--jwt-public-key", "k", "--jwt-public-key-file", tokFile}, []string{"--jwt-public-key-file", "--jwt-public-key", "give one"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runBinary(t, tc.env, append([]string{"--addr", "127.0.0.1:0"}, tc.args...)...)
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			if code != 2 || len(lines) != 1 || strings.Contains(out, secret) {
				t.Fatalf("exit %d with %d lines, want 2 and one line without the secret:\n%s", code, len(lines), out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("the line does not say %q: %s", w, out)
				}
			}
		})
	}

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	keyFile := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	jwtOK, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "agent", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"--token-file and --jwt-public-key-file", nil, []string{"--token-file", tokFile, "--jwt-public-key-file", keyFile}},
		{"AIO_TOKEN_FILE and AIO_JWT_PUBLIC_KEY_FILE", []string{"AIO_TOKEN_FILE=" + tokFile, "AIO_JWT_PUBLIC_KEY_FILE=" + keyFile}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startDaemonEnv(t, tc.env, tc.args...)
			get := func(auth string) int {
				return getStatus(t, d, "/v2/code/info", auth)
			}
			if a, b, c := get(""), get(secret), get(jwtOK); a != 401 || b != 200 || c != 200 {
				t.Errorf("no credentials %d, the file's token %d, a JWT for the file's key %d; want 401 200 200", a, b, c)
			}
			if getStatus(t, d, "/v2/code/info?token="+url.QueryEscape(secret+"\n"), "") == 200 {
				t.Error("the token with its newline passed")
			}
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", d.cmd.Process.Pid))
			if err != nil || strings.Contains(string(cmdline), secret) {
				t.Errorf("the daemon's command line holds the token (%v): %q", err, cmdline)
			}
		})
	}

	o, err := parseOptions([]string{"--jupyter-token-file", tokFile}, fakeLookup(nil), io.Discard)
	if err != nil || o.jupyterToken != secret {
		t.Errorf("--jupyter-token-file: %q %v, want %q", o.jupyterToken, err, secret)
	}
	code, out := runBinary(t, nil, "--help")
	for _, want := range []string{"--token-file file", "--jupyter-token-file file", "--jwt-public-key-file file", "--jwt-public-key pem",
		"AIO_TOKEN token", "AIO_JUPYTER_TOKEN token", "--max-tickets-per-caller count", "--max-conns-per-ip count"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("--help (exit %d) does not list %q", code, want)
		}
	}
	if strings.Contains(out, "  --token token") || strings.Contains(out, "  --jupyter-token token") {
		t.Errorf("--help offers a secret as a flag:\n%s", out)
	}
}

// getStatus GETs path, with auth as a bearer token when set, and returns
// the status.
func getStatus(t *testing.T, d *daemon, path, auth string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", d.url+path, nil)
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestUnauthenticatedBodiesStayOutOfMemory runs the attack of issue 23
// against the binary with a token: 100 connections without credentials,
// each declaring a 64 MiB body (Content-Length, or one chunk of that size)
// and sending a few bytes, kept open. Each is answered 401 (or closed),
// and aiod's resident memory grows by less than 64 MiB (before, 20 such
// connections took it from 23 to 1,536 MiB). An authenticated 20 MiB
// upload still works.
func TestUnauthenticatedBodiesStayOutOfMemory(t *testing.T) {
	t.Parallel()
	const token = "rss-t0ken"
	d := startDaemonEnv(t, []string{"AIO_TOKEN=" + token})
	pid := d.cmd.Process.Pid
	host := strings.TrimPrefix(d.url, "http://")
	for _, variant := range []struct{ name, head, tail string }{
		{"Content-Length", "Content-Length: 67108864\r\n", `{"path":"`},
		{"chunked", "Transfer-Encoding: chunked\r\n", "4000000\r\n{\"path\":\""},
	} {
		before, err := vmRSS(pid)
		if err != nil {
			t.Fatal(err)
		}
		const n = 100
		conns := make([]net.Conn, 0, n)
		for range n {
			c, err := net.DialTimeout("tcp", host, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			_, _ = io.WriteString(c, "POST /v2/fs/write HTTP/1.1\r\nHost: "+host+"\r\nContent-Type: application/json\r\n"+variant.head+"\r\n"+variant.tail)
		}
		peak := before
		type outcome struct {
			status int
			auth   string
			err    error
		}
		got := make(chan outcome, n)
		for _, c := range conns {
			go func() {
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					got <- outcome{err: err}
					return
				}
				resp.Body.Close()
				got <- outcome{status: resp.StatusCode, auth: resp.Header.Get("WWW-Authenticate")}
			}()
		}
		answered, closed := 0, 0
		for range n {
			o := <-got
			switch {
			case o.err != nil && (errors.Is(o.err, io.EOF) || errors.Is(o.err, io.ErrUnexpectedEOF) || errors.Is(o.err, syscall.ECONNRESET)):
				closed++
			case o.err != nil:
				t.Errorf("%s: %v", variant.name, o.err)
			case o.status == 401 && o.auth != "":
				answered++
			default:
				t.Errorf("%s: answered %d (WWW-Authenticate %q), want 401", variant.name, o.status, o.auth)
			}
			if rss, err := vmRSS(pid); err == nil {
				peak = max(peak, rss)
			}
		}
		for _, c := range conns {
			c.Close()
		}
		hwm, err := vmHWM(pid)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d answered 401, %d closed; RSS %d MiB before, %d MiB at the sampled peak (+%d MiB); VmHWM %d MiB",
			variant.name, answered, closed, before>>20, peak>>20, (peak-before)>>20, hwm>>20)
		if peak-before >= 64<<20 || hwm-before >= 64<<20 {
			t.Errorf("%s: RSS grew from %d MiB to %d MiB (VmHWM %d MiB), want less than 64 MiB more", variant.name, before>>20, peak>>20, hwm>>20)
		}
	}

	body := `{"path":"` + filepath.Join(t.TempDir(), "big") + `","content":"` + strings.Repeat("a", 20<<20) + `"}`
	req, _ := http.NewRequest("POST", d.url+"/v2/fs/write", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), fmt.Sprintf(`"size":%d`, 20<<20)) {
		t.Errorf("an authenticated 20 MiB upload: %d %.300s", resp.StatusCode, b)
	}
}

// A module planted in aiod's working folder never runs: aiod (root) runs
// Python for its own probes and listings, and "python -c" puts the
// working folder first on the import path.
func TestPlantedModuleNeverRuns(t *testing.T) {
	t.Parallel()
	dir, marks := t.TempDir(), t.TempDir()
	for _, m := range []string{"json", "ipykernel", "importlib_metadata"} {
		code := fmt.Sprintf("open(%q, 'w').write('planted')\n", filepath.Join(marks, m))
		if err := os.WriteFile(filepath.Join(dir, m+".py"), []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d := startDaemonEnv(t, []string{workingDir + dir})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for _, path := range []string{"/v1/sandbox/packages/python", "/v1/sandbox/packages/nodejs", "/v1/sandbox"} {
		st, m := d.getJSON(ctx, path)
		if st != 200 || m["success"] != true {
			t.Fatalf("GET %s: %d %v", path, st, m)
		}
	}
	if a := d.execute(ctx, "", "import json; print(json.dumps(1))", 60); a.Stdout != "1\n" {
		t.Fatalf("execute: %+v", a)
	}
	if ran, _ := os.ReadDir(marks); len(ran) != 0 {
		t.Fatalf("planted modules ran: %v", ran)
	}
}
