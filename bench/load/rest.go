package load

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/goccy/go-json"
)

// restCaller posts to /v2/code/execute over one keep-alive connection.
type restCaller struct {
	cfg    Config
	client *http.Client
}

func newCaller(ctx context.Context, cfg Config) (caller, error) {
	switch cfg.Mode {
	case "", "rest":
		return &restCaller{cfg: cfg, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}}, nil
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
	body := map[string]any{"language": r.cfg.Language, "code": code, "timeout": r.cfg.Timeout}
	if session != "" {
		body["session_id"] = session
	}
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, "POST", r.cfg.URL+"/v2/code/execute", bytes.NewReader(raw))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if r.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	var a execAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		return "", &statusError{"not_json", fmt.Sprintf("answer is not JSON: %.200q", out)}
	}
	return a.verify(resp.StatusCode)
}

func (r *restCaller) close() { r.client.CloseIdleConnections() }
