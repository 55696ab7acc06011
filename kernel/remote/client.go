package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/goccy/go-json"
)

// DefaultProbeTimeout bounds Probe when ctx has no earlier deadline.
const DefaultProbeTimeout = 10 * time.Second

// maxErrorBody is how much of an error response's body is read.
const maxErrorBody = 64 << 10

// Client talks to one Jupyter server (Jupyter Server, Kernel Gateway,
// Enterprise Gateway, or another aiod) through its REST API. It holds no
// kernel; Start does. A Client is safe for concurrent use and may be shared
// by any number of kernels.
type Client struct {
	// Static after NewClient.
	base     *url.URL // scheme, host and base path (no trailing slash)
	endpoint string   // base, credentials redacted, for messages
	token    string
	hc       *http.Client
	probe    time.Duration
}

// ClientOption configures NewClient.
type ClientOption func(*Client)

// WithHTTPClient makes the Client use hc for REST calls and WebSocket
// handshakes. hc.Timeout must be zero (contexts bound every call) and its
// Transport must speak HTTP/1.1 to the server (the WebSocket handshake is
// an HTTP/1.1 upgrade). By
// default the Client uses its own clone of http.DefaultTransport whose
// connections acknowledge reads at once (see quickAckDial).
func WithHTTPClient(hc *http.Client) ClientOption {
	return func(c *Client) { c.hc = hc }
}

// WithProbeTimeout sets Probe's default deadline (DefaultProbeTimeout).
func WithProbeTimeout(d time.Duration) ClientOption {
	return func(c *Client) {
		if d > 0 {
			c.probe = d
		}
	}
}

// NewClient returns a Client for endpoint, http(s)://host:port[/base] (the
// form of AIO_JUPYTER_ENDPOINT), authenticating with token (sent as
// "Authorization: token …"; empty sends none). It checks the endpoint's
// form only; Probe checks that the server answers.
func NewClient(endpoint, token string, opts ...ClientOption) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(endpoint))
	if err != nil {
		return nil, fmt.Errorf("jupyter endpoint %q: %w", endpoint, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("jupyter endpoint %q: scheme must be http or https", endpoint)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("jupyter endpoint %q: no host", endpoint)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("jupyter endpoint %q: no query or fragment allowed", u.Redacted())
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	c := &Client{
		base:     u,
		endpoint: u.Redacted(),
		token:    token,
		probe:    DefaultProbeTimeout,
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = quickAckDial(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second})
		// The WebSocket handshake is an HTTP/1.1 upgrade, which an HTTP/2
		// connection to the same host could not carry.
		tr.ForceAttemptHTTP2 = false
		c.hc = &http.Client{Transport: tr}
	}
	return c, nil
}

// Endpoint returns the endpoint as given to NewClient, without a trailing
// slash and with any password redacted.
func (c *Client) Endpoint() string { return c.endpoint }

// CloseIdleConnections closes the Client's idle keep-alive connections.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// ServerInfo is what Probe learns about a Jupyter server.
type ServerInfo struct {
	Endpoint      string
	Version       string // GET /api "version", e.g. "1.23.3"
	DefaultKernel string // kernelspec name the server starts when none is given
	KernelSpecs   []KernelSpec
}

// KernelSpec is one entry of GET /api/kernelspecs.
type KernelSpec struct {
	Name          string
	DisplayName   string
	Language      string
	InterruptMode string // "signal", "message" or empty
}

// Probe checks that the server answers and that the token is accepted: GET
// {base}/api for the version and GET {base}/api/kernelspecs (which needs
// the token) for the kernelspecs. It gives up at ctx's deadline or after the
// probe timeout (DefaultProbeTimeout unless WithProbeTimeout). Errors read
// "probe jupyter server ENDPOINT: ...".
func (c *Client) Probe(ctx context.Context) (ServerInfo, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, c.probe,
		fmt.Errorf("%w (probe timeout %s)", context.DeadlineExceeded, c.probe))
	defer cancel()
	info := ServerInfo{Endpoint: c.endpoint}
	var api struct {
		Version string `json:"version"`
	}
	if err := c.call(ctx, http.MethodGet, "/api", nil, &api, http.StatusOK); err != nil {
		return info, fmt.Errorf("probe jupyter server %s: %w", c.endpoint, err)
	}
	info.Version = api.Version
	var specs struct {
		Default     string `json:"default"`
		KernelSpecs map[string]struct {
			Name string `json:"name"`
			Spec struct {
				DisplayName   string `json:"display_name"`
				Language      string `json:"language"`
				InterruptMode string `json:"interrupt_mode"`
			} `json:"spec"`
		} `json:"kernelspecs"`
	}
	if err := c.call(ctx, http.MethodGet, "/api/kernelspecs", nil, &specs, http.StatusOK); err != nil {
		return info, fmt.Errorf("probe jupyter server %s: %w", c.endpoint, err)
	}
	info.DefaultKernel = specs.Default
	for key, s := range specs.KernelSpecs {
		name := s.Name
		if name == "" {
			name = key
		}
		info.KernelSpecs = append(info.KernelSpecs, KernelSpec{
			Name:          name,
			DisplayName:   s.Spec.DisplayName,
			Language:      s.Spec.Language,
			InterruptMode: s.Spec.InterruptMode,
		})
	}
	sort.Slice(info.KernelSpecs, func(i, j int) bool { return info.KernelSpecs[i].Name < info.KernelSpecs[j].Name })
	return info, nil
}

// KernelModel is the server's description of a kernel (GET
// /api/kernels/{id}).
type KernelModel struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	LastActivity   string `json:"last_activity"`
	ExecutionState string `json:"execution_state"` // "starting", "idle", "busy", "dead", ...
	Connections    int    `json:"connections"`
}

// Kernel returns the model of kernel id. A kernel the server does not know
// gives an error wrapping *GoneError (errors.Is(err, ErrGone)).
func (c *Client) Kernel(ctx context.Context, id string) (KernelModel, error) {
	var m KernelModel
	err := c.call(ctx, http.MethodGet, kernelPath(id, ""), nil, &m, http.StatusOK)
	return m, c.goneIf404(id, err)
}

// Kernels lists the server's kernels (GET /api/kernels).
func (c *Client) Kernels(ctx context.Context) ([]KernelModel, error) {
	var ms []KernelModel
	err := c.call(ctx, http.MethodGet, "/api/kernels", nil, &ms, http.StatusOK)
	return ms, err
}

// DeleteKernel shuts kernel id down and forgets it (DELETE
// /api/kernels/{id}). A kernel the server does not know gives an error
// wrapping *GoneError.
func (c *Client) DeleteKernel(ctx context.Context, id string) error {
	err := c.call(ctx, http.MethodDelete, kernelPath(id, ""), nil, nil, http.StatusNoContent, http.StatusOK)
	return c.goneIf404(id, err)
}

// startKernel asks for a new kernel of kernelspec name ("" for the server's
// default) with env passed in the body (Enterprise Gateway reads KERNEL_*
// variables from it; Jupyter Server ignores it).
func (c *Client) startKernel(ctx context.Context, name string, env map[string]string) (KernelModel, error) {
	body := map[string]any{}
	if name != "" {
		body["name"] = name
	}
	if len(env) > 0 {
		body["env"] = env
	}
	var m KernelModel
	if err := c.call(ctx, http.MethodPost, "/api/kernels", body, &m, http.StatusCreated, http.StatusOK); err != nil {
		return m, err
	}
	if !validID(m.ID) {
		return m, fmt.Errorf("POST /api/kernels: the answer has no usable kernel id (%q)", m.ID)
	}
	return m, nil
}

func (c *Client) interruptKernel(ctx context.Context, id string) error {
	err := c.call(ctx, http.MethodPost, kernelPath(id, "/interrupt"), nil, nil, http.StatusNoContent, http.StatusOK)
	return c.goneIf404(id, err)
}

func (c *Client) restartKernel(ctx context.Context, id string) error {
	err := c.call(ctx, http.MethodPost, kernelPath(id, "/restart"), nil, nil, http.StatusOK, http.StatusNoContent)
	return c.goneIf404(id, err)
}

// kernelPath returns the REST path of kernel id. An id that is not a plain
// token (servers use UUIDs) is replaced by one that cannot match, so that
// a stray "/" or "?" never reaches another route.
func kernelPath(id, suffix string) string {
	if !validID(id) {
		id = "invalid-kernel-id"
	}
	return "/api/kernels/" + id + suffix
}

// validID reports whether id is made of letters, digits, '-', '_' and '.'
// only, as the kernel ids of Jupyter servers are.
func validID(id string) bool {
	if id == "" || id == "." || id == ".." {
		return false
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
		if !ok {
			return false
		}
	}
	return true
}

// goneIf404 turns a 404 about kernel id into a *GoneError wrapping it.
func (c *Client) goneIf404(id string, err error) error {
	if statusOf(err) != http.StatusNotFound {
		return err
	}
	return fmt.Errorf("%w: %w", &GoneError{KernelID: id, Endpoint: c.endpoint, Reason: "culled or deleted"}, err)
}

// call does one REST call: body (if not nil) is sent as JSON, and the
// answer, when its status is one of want, is decoded into out (if not nil).
// Errors read "METHOD PATH: ...", PATH being below the endpoint.
func (c *Client) call(ctx context.Context, method, path string, body, out any, want ...int) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s %s: encode body: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, false), rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	c.authorize(req.Header)
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) { // drop net/http's quoted URL: the path is named already
			err = ue.Err
		}
		if ctx.Err() != nil { // the deadline (and its description) says more
			err = context.Cause(ctx)
		}
		return fmt.Errorf("%s %s: %w", method, path, redact(err, c.token))
	}
	defer resp.Body.Close()
	for _, w := range want {
		if resp.StatusCode != w {
			continue
		}
		if out == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
			return nil
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
		return nil
	}
	return &HTTPError{Method: method, Path: path, Status: resp.StatusCode, Message: errorMessage(resp.Body)}
}

// errorMessage reads Jupyter's error body {"message": ..., "reason": ...},
// or the start of a body in another form.
func errorMessage(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, maxErrorBody))
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil && e.Message != "" {
		return e.Message
	}
	s := strings.TrimSpace(string(b))
	if strings.HasPrefix(s, "<") { // an HTML error page says nothing the status does not
		return ""
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// url returns the absolute URL of path below the base; ws turns http(s)
// into ws(s).
func (c *Client) url(path string, ws bool) string {
	u := *c.base
	u.Path = c.base.Path + path
	if ws {
		if u.Scheme == "https" {
			u.Scheme = "wss"
		} else {
			u.Scheme = "ws"
		}
	}
	return u.String()
}

func (c *Client) authorize(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "token "+c.token)
	}
}
