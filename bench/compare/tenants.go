package compare

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	"github.com/aiod/aiod/bench/load"
	"github.com/golang-jwt/jwt/v5"
)

// Modes of the tenants phase: daemons with the default pools whose callers
// are JWT subjects, under tenant isolation and without it.
const (
	ModeTenants      = "tenants"
	ModeTenantsPlain = "tenants_plain"
)

// tenantRow is how many new sessions one tenant opens in a row, and the
// pause between two: the pace of an agent that opens sessions one after
// the other, which gives the tenant's pool time to refill one kernel.
const (
	tenantRow      = 8
	tenantRowPause = 300 * time.Millisecond
	// newTenants is how many tenants aiod has never seen open their first
	// session, one at a time, newTenantPause apart (a new spare is made
	// 300 ms after one is adopted, and its pools fill under the start
	// gate).
	newTenants     = 8
	newTenantPause = 1500 * time.Millisecond
)

// TenantsResult is what JWT tenants wait for a new session, by mode.
type TenantsResult struct {
	// Row is the first execute of each of one tenant's tenantRow new
	// sessions in a row, after its first (which is not counted).
	Row map[string]*Summary `json:"row"`
	// New is the first execute of the first session of tenants the
	// daemon has never seen.
	New map[string]*Summary `json:"new_tenant"`
}

// jwtSigner makes a key pair and returns the public key as aiod takes it
// (PEM) and a function that signs a token for a subject.
func jwtSigner() (string, func(sub string) (string, error), error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", nil, err
	}
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	sign := func(sub string) (string, error) {
		return jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(24 * time.Hour).Unix()}).SignedString(priv)
	}
	return pemKey, sign, nil
}

// tenants measures, on each of ds (ModeTenants, ModeTenantsPlain), one
// tenant's new sessions in a row and new tenants' first sessions.
func (r *runner) tenants(ctx context.Context, ds map[string]*daemon, sign func(string) (string, error)) *TenantsResult {
	res := &TenantsResult{Row: map[string]*Summary{}, New: map[string]*Summary{}}
	for _, m := range []string{ModeTenants, ModeTenantsPlain} {
		d := ds[m]
		row, err := r.tenantSessions(ctx, d, sign, []string{"row"}, tenantRow+1, tenantRowPause)
		if len(row) > 0 {
			row = row[1:] // the tenant's first session: a new tenant's
		}
		res.Row[m] = r.tenantSummary("row", m, row, err)
		var subs []string
		for i := range newTenants {
			subs = append(subs, fmt.Sprintf("new-%s-%d", r.run, i))
		}
		lats, err := r.tenantSessions(ctx, d, sign, subs, 1, newTenantPause)
		res.New[m] = r.tenantSummary("new_tenant", m, lats, err)
		r.logf("start %s: one tenant's new sessions in a row p50 %.1f ms; a new tenant's first session p50 %.1f ms",
			m, res.Row[m].P50, res.New[m].P50)
	}
	return res
}

// tenantSessions opens n new sessions for each subject of subs in turn,
// pause apart, and returns each one's first execute in ms.
func (r *runner) tenantSessions(ctx context.Context, d *daemon, sign func(string) (string, error), subs []string, n int, pause time.Duration) ([]float64, error) {
	var lats []float64
	for _, sub := range subs {
		tok, err := sign(sub)
		if err != nil {
			return lats, err
		}
		c, err := load.NewClient(ctx, load.Config{URL: d.url, Mode: "rest", Code: passCode, Timeout: 300, Token: tok})
		if err != nil {
			return lats, err
		}
		for i := range n {
			select {
			case <-ctx.Done():
				c.Close()
				return lats, ctx.Err()
			case <-time.After(pause):
			}
			took, err := c.Call(ctx, fmt.Sprintf("aiobench-%s-tenant-%s-%d", r.run, sub, i), fmt.Sprintf("aiobench-%s-%d", sub, i))
			if err != nil {
				c.Close()
				return lats, fmt.Errorf("aiod %s, tenant %s, session %d: %w", d.name, sub, i, err)
			}
			lats = append(lats, ms(took))
		}
		c.Close()
	}
	return lats, nil
}

func (r *runner) tenantSummary(what, mode string, lats []float64, err error) *Summary {
	if err != nil {
		r.res.Failures["start/tenants/"+what+"/"+mode] = err.Error()
		return &Summary{Err: err.Error()}
	}
	return summarize(lats, 0, 0)
}
