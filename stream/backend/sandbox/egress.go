package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// With --runtime-network allow a tenant's network namespace has one way
// out: an HTTP proxy aiod serves inside it, at ProxyAddr on the tenant's
// own loopback (the listening socket is made in the namespace, and aiod
// accepts on it from its own). It lets through only the destinations
// --egress-allow lists (CONNECT tunnels, and plain HTTP requests it
// forwards), resolving names itself, and refuses the rest with 403, logged
// and counted. Runtimes find it through HTTP_PROXY and HTTPS_PROXY.

// NetworkAllow is the third network mode: the tenant's own namespace, and
// the egress proxy.
const NetworkAllow = "allow"

// ProxyPort is the egress proxy's port on each tenant's loopback.
const ProxyPort = 3128

// ProxyURL is what runtimes get as HTTP_PROXY and HTTPS_PROXY.
var ProxyURL = "http://127.0.0.1:" + strconv.Itoa(ProxyPort)

const (
	egressDialTimeout = 10 * time.Second
	egressIdle        = 5 * time.Minute // a tunnel or request quiet this long is closed
	egressPerTenant   = 64              // connections one tenant's proxy serves at once
)

// EgressRule is one --egress-allow entry: a host (a name, "*.name" for its
// subdomains, or an IP address) and a port.
type EgressRule struct {
	Host string
	Port uint16
	ip   netip.Addr // when Host is an address
}

// ParseEgress reads --egress-allow: comma-separated HOST:PORT entries.
func ParseEgress(list []string) ([]EgressRule, error) {
	var out []EgressRule
	for _, e := range list {
		host, port, err := net.SplitHostPort(strings.TrimSpace(e))
		if err != nil {
			return nil, fmt.Errorf("--egress-allow %q: want HOST:PORT (a name, *.name, or an address; IPv6 in brackets)", e)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("--egress-allow %q: port %q is not a number from 1 to 65535", e, port)
		}
		r := EgressRule{Host: strings.ToLower(strings.TrimSuffix(host, ".")), Port: uint16(p)}
		if ip, err := netip.ParseAddr(host); err == nil {
			r.ip = ip.Unmap()
		} else if r.Host == "" || strings.ContainsAny(r.Host, "/ ") || strings.Contains(strings.TrimPrefix(r.Host, "*."), "*") {
			return nil, fmt.Errorf("--egress-allow %q: %q is not a host name, *.name or an address", e, host)
		}
		out = append(out, r)
	}
	return out, nil
}

// match is the rule letting host:port through, or nil.
func matchEgress(rules []EgressRule, host string, port uint16) *EgressRule {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	ip, err := netip.ParseAddr(host)
	isIP := err == nil
	for i := range rules {
		r := &rules[i]
		if r.Port != port {
			continue
		}
		switch {
		case r.ip.IsValid():
			if isIP && ip.Unmap() == r.ip {
				return r
			}
		case strings.HasPrefix(r.Host, "*."):
			if !isIP && strings.HasSuffix(host, r.Host[1:]) {
				return r
			}
		case !isIP && host == r.Host:
			return r
		}
	}
	return nil
}

// EgressStats counts the proxies' decisions.
type EgressStats struct {
	Allowed, Refused atomic.Uint64
}

// egressProxy is one tenant's proxy.
type egressProxy struct {
	tenant atomic.Pointer[string] // whom its logs name: a spare's proxy is re-keyed when adopted
	rules  []EgressRule
	ln     net.Listener
	log    *slog.Logger
	stats  *EgressStats
	srv    *http.Server
	sem    chan struct{}
	done   chan struct{}
}

func newEgressProxy(tenant string, ln net.Listener, rules []EgressRule, stats *EgressStats, log *slog.Logger) *egressProxy {
	p := &egressProxy{rules: rules, ln: ln, log: log, stats: stats,
		sem: make(chan struct{}, egressPerTenant), done: make(chan struct{})}
	p.setTenant(tenant)
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: egressIdle,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(ln)
	}()
	return p
}

// setTenant names the tenant the proxy serves in its logs from now on.
func (p *egressProxy) setTenant(key string) { p.tenant.Store(&key) }

func (p *egressProxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if p.srv.Shutdown(ctx) != nil {
		_ = p.srv.Close() // tunnels are hijacked: Close ends the listener, they end with their deadlines
	}
	<-p.done
}

// ServeHTTP tunnels a CONNECT or forwards a plain request, when allowed.
func (p *egressProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case p.sem <- struct{}{}:
		defer func() { <-p.sem }()
	default:
		http.Error(w, fmt.Sprintf("aiod: this tenant already has %d connections through the egress proxy", egressPerTenant), http.StatusServiceUnavailable)
		return
	}
	host, port, err := target(r)
	if err != nil {
		http.Error(w, "aiod: "+err.Error(), http.StatusBadRequest)
		return
	}
	addr, err := p.allow(host, port)
	if err != nil {
		p.stats.Refused.Add(1)
		p.log.Info("egress refused", "tenant", *p.tenant.Load(), "host", host, "port", port, "why", err)
		http.Error(w, "aiod: "+err.Error(), http.StatusForbidden)
		return
	}
	p.stats.Allowed.Add(1)
	if r.Method == http.MethodConnect {
		p.tunnel(w, addr)
		return
	}
	p.forward(w, r, addr)
}

// target is where a request goes: CONNECT's authority, or the host of a
// plain request's absolute URL.
func target(r *http.Request) (string, uint16, error) {
	hostport := r.Host
	if r.Method != http.MethodConnect {
		if r.URL.Scheme != "http" || r.URL.Host == "" {
			return "", 0, errors.New("the egress proxy takes CONNECT, or an absolute http:// URL")
		}
		hostport = r.URL.Host
		if r.URL.Port() == "" {
			hostport = net.JoinHostPort(r.URL.Hostname(), "80")
		}
	}
	h, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", 0, fmt.Errorf("bad target %q", hostport)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("bad port in %q", hostport)
	}
	return h, uint16(port), nil
}

// allow checks host:port against the rules and resolves it: an address of
// the machine itself, link-local (a cloud's metadata service) or
// unspecified is refused unless a rule names that very address.
func (p *egressProxy) allow(host string, port uint16) (string, error) {
	rule := matchEgress(p.rules, host, port)
	if rule == nil {
		return "", fmt.Errorf("%s is not in --egress-allow", net.JoinHostPort(host, strconv.Itoa(int(port))))
	}
	if rule.ip.IsValid() {
		return net.JoinHostPort(rule.ip.String(), strconv.Itoa(int(port))), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), egressDialTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return "", fmt.Errorf("cannot resolve %s: %v", host, err)
	}
	for _, ip := range ips {
		ip = ip.Unmap()
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsMulticast() {
			return "", fmt.Errorf("%s resolves to %s, which only an --egress-allow entry naming that address lets through", host, ip)
		}
	}
	return net.JoinHostPort(ips[0].String(), strconv.Itoa(int(port))), nil
}

func (p *egressProxy) tunnel(w http.ResponseWriter, addr string) {
	up, err := net.DialTimeout("tcp", addr, egressDialTimeout)
	if err != nil {
		http.Error(w, "aiod: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer up.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "aiod: cannot tunnel", http.StatusInternalServerError)
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer down.Close()
	if _, err := down.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { copyIdle(up, buf.Reader, down); closeWrite(up) })
	copyIdle(down, up, up)
	closeWrite(down)
	wg.Wait()
}

// forward sends a plain HTTP request on and copies the answer back.
func (p *egressProxy) forward(w http.ResponseWriter, r *http.Request, addr string) {
	up, err := net.DialTimeout("tcp", addr, egressDialTimeout)
	if err != nil {
		http.Error(w, "aiod: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer up.Close()
	_ = up.SetDeadline(time.Now().Add(egressIdle))
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Connection")
	out.Header.Del("Proxy-Authorization")
	out.Close = true
	if err := out.Write(up); err != nil {
		http.Error(w, "aiod: "+err.Error(), http.StatusBadGateway)
		return
	}
	resp, err := http.ReadResponse(bufio.NewReader(up), out)
	if err != nil {
		http.Error(w, "aiod: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// copyIdle copies src to dst until either ends or idles for egressIdle;
// deadline is the connection whose read deadline is moved along.
func copyIdle(dst io.Writer, src io.Reader, deadline net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		_ = deadline.SetReadDeadline(time.Now().Add(egressIdle))
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
