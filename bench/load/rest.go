package load

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
)

// restCaller posts to /v2/code/execute over keep-alive connections (one
// per call in flight: a worker makes one).
// It uses fasthttp's client, which runs a call on the caller's goroutine
// and writes the request in one write: net/http's client hands each call
// to two goroutines of its own, and on two cores shared with aiod and its
// kernels the load generator's CPU is taken from what it measures.
type restCaller struct {
	cfg    Config
	client *fasthttp.HostClient
	uri    string
}

func newRESTCaller(cfg Config) (*restCaller, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("url %q: want http://host:port", cfg.URL)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("url %q: only http is supported", cfg.URL)
	}
	c := &fasthttp.HostClient{Addr: u.Host, MaxResponseBodySize: 256 << 20,
		NoDefaultUserAgentHeader: true, DisablePathNormalizing: true}
	return &restCaller{cfg: cfg, client: c, uri: cfg.URL + "/v2/code/execute"}, nil
}

func newCaller(ctx context.Context, cfg Config) (caller, error) {
	switch cfg.Mode {
	case "", "rest":
		return newRESTCaller(cfg)
	case "ws":
		return dialWS(ctx, cfg)
	}
	return nil, fmt.Errorf("mode %q: want rest or ws", cfg.Mode)
}

// execAnswer is the part of the v2 answer the checks read.
type execAnswer struct {
	Success bool   `json:"success"`
	Message string `json:"message"`
	Data    *struct {
		Status string `json:"status"`
		Stdout string `json:"stdout"`
	} `json:"data"`
}

func (a *execAnswer) verify(httpStatus int) (string, error) {
	if httpStatus != http.StatusOK {
		return "", &statusError{fmt.Sprintf("http_%d", httpStatus), fmt.Sprintf("HTTP %d: %s", httpStatus, a.Message)}
	}
	if a.Data == nil || !a.Success || a.Data.Status != "ok" {
		st := "?"
		if a.Data != nil {
			st = a.Data.Status
		}
		return "", &statusError{"status_" + st, fmt.Sprintf("execution %s: %s", st, a.Message)}
	}
	return a.Data.Stdout, nil
}

func (r *restCaller) call(ctx context.Context, code, session string) (string, error) {
	raw, _ := json.Marshal(execRequest{Language: r.cfg.Language, Code: code, Timeout: r.cfg.Timeout, SessionID: session})
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(r.uri)
	req.Header.SetMethod("POST")
	req.Header.SetContentType("application/json")
	if r.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	}
	req.SetBodyRaw(raw)
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Minute)
	}
	if err := r.client.DoDeadline(req, resp, deadline); err != nil {
		return "", err
	}
	var a execAnswer
	if err := json.Unmarshal(resp.Body(), &a); err != nil {
		return "", &statusError{"not_json", fmt.Sprintf("answer is not JSON: %.200q", resp.Body())}
	}
	return a.verify(resp.StatusCode())
}

func (r *restCaller) close() { r.client.CloseIdleConnections() }
