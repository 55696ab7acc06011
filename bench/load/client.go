package load

import (
	"context"
	"time"
)

// Client makes single checked calls over one connection (REST or
// WebSocket, per cfg.Mode), for callers that schedule calls themselves,
// e.g. interleaving several paths call by call.
type Client struct {
	cfg Config
	c   caller
}

// NewClient opens one connection to the daemon at cfg.URL.
func NewClient(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Language == "" {
		cfg.Language = "python"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60
	}
	c, err := newCaller(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, c: c}, nil
}

// Call runs cfg.Code plus a line printing tok in session (empty: a
// one-shot call) and checks that the answer is ok and that its stdout ends
// with tok and holds no other call's token. tok must contain "aiobench-"
// exactly once. The duration is the call's round trip.
func (c *Client) Call(ctx context.Context, tok, session string) (time.Duration, error) {
	return check(ctx, c.c, c.cfg, tok, session)
}

// Close closes the connection.
func (c *Client) Close() { c.c.close() }
