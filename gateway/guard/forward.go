package guard

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
)

// ForwardedHeader carries, on a request that one aiod replica forwards to
// the caller's home replica, the caller as the first replica verified it,
// signed with the cluster's shared secret (--cluster-secret-file): the
// home trusts that caller instead of judging credentials again (a ticket
// is known only to the replica that issued it). A request that carries the
// header without a valid signature is refused, whatever its other
// credentials.
const ForwardedHeader = "AIO-Forwarded-Caller"

// forwardSkew is how far a forwarded claim's time may be from the home's
// clock: a claim is good for one request (its method and URI) within it.
const forwardSkew = 60 * time.Second

// forwardClaim is what a forwarded request's header says.
type forwardClaim struct {
	Method  string `json:"m"`
	Subject string `json:"s,omitempty"`
	Ticket  bool   `json:"k,omitempty"`
	From    string `json:"f"` // the replica that verified the caller
	At      int64  `json:"t"` // when, in Unix milliseconds
	Target  string `json:"u"` // the request it is for: method, space, request URI
}

type forwardedKey struct{}

// SetClusterSecret sets the secret replicas sign forwarded callers with;
// without one, every forwarded request is refused.
func (g *Guard) SetClusterSecret(secret []byte) {
	g.clusterSecret = append([]byte(nil), secret...)
}

// SignForwarded returns the ForwardedHeader value for a request of c that
// replica from forwards: method and requestURI are the request's own.
func (g *Guard) SignForwarded(c Caller, from string, method, requestURI []byte) string {
	b, _ := json.Marshal(forwardClaim{Method: c.Method, Subject: c.Subject, Ticket: c.Ticket, From: from,
		At: g.now().UnixMilli(), Target: string(method) + " " + string(requestURI)})
	payload := base64.RawURLEncoding.EncodeToString(b)
	return payload + "." + base64.RawURLEncoding.EncodeToString(g.forwardMAC(payload))
}

func (g *Guard) forwardMAC(payload string) []byte {
	m := hmac.New(sha256.New, g.clusterSecret)
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// verifyForwarded checks a ForwardedHeader value for the request (method,
// requestURI): the caller it names, or why it is refused.
func (g *Guard) verifyForwarded(v, method, requestURI []byte) (Caller, string, string) {
	const refused = "a request that says another aiod replica forwarded it"
	if len(g.clusterSecret) == 0 {
		return Caller{}, "", refused + " reached an aiod that is not in a cluster (no --cluster-secret-file)"
	}
	payload, mac, ok := strings.Cut(string(v), ".")
	sum, err := base64.RawURLEncoding.DecodeString(mac)
	if !ok || err != nil || !hmac.Equal(sum, g.forwardMAC(payload)) {
		return Caller{}, "", refused + " is not signed with this cluster's secret (--cluster-secret-file)"
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	var fc forwardClaim
	if err != nil || json.Unmarshal(b, &fc) != nil {
		return Caller{}, "", refused + " carries a claim that cannot be read"
	}
	if d := g.now().Sub(time.UnixMilli(fc.At)); d > forwardSkew || d < -forwardSkew {
		return Caller{}, "", fmt.Sprintf("%s was signed %s away from this replica's clock (at most %s)", refused, d.Round(time.Second), forwardSkew)
	}
	if fc.Target != string(method)+" "+string(requestURI) {
		return Caller{}, "", refused + " was signed for another request"
	}
	switch fc.Method {
	case "none", "token", "jwt":
	default:
		return Caller{}, "", refused + " names no known kind of caller"
	}
	return Caller{Method: fc.Method, Subject: fc.Subject, Ticket: fc.Ticket}, fc.From, ""
}

// authorizeForwarded judges a request carrying ForwardedHeader (present
// false when it carries none): a valid one is its caller's, as the
// forwarding replica verified it.
func (g *Guard) authorizeForwarded(ctx *fasthttp.RequestCtx) (present, ok bool) {
	v := ctx.Request.Header.Peek(ForwardedHeader)
	if len(v) == 0 {
		return false, false
	}
	c, from, why := g.verifyForwarded(v, ctx.Method(), ctx.Request.RequestURI())
	if why != "" {
		g.refuse(ctx, fasthttp.StatusForbidden, why,
			"only aiod replicas sharing --cluster-secret-file may send "+ForwardedHeader)
		return true, false
	}
	ctx.SetUserValue(callerKey{}, c)
	ctx.SetUserValue(forwardedKey{}, from)
	return true, true
}

// ForwardedBy is the replica that forwarded ctx's request (verified), or
// "" when it came from a client.
func ForwardedBy(ctx *fasthttp.RequestCtx) string {
	s, _ := ctx.UserValue(forwardedKey{}).(string)
	return s
}
