package guard

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// JWTLeeway is the clock skew allowed on exp, nbf and iat.
const JWTLeeway = 30 * time.Second

// jwtVerifier checks bearer JWTs against one public key, with
// github.com/golang-jwt/jwt/v5: the signature, an algorithm that fits the
// key (never "none", never HMAC, so a public key cannot be used as an HMAC
// secret), exp required, nbf and iat honoured, JWTLeeway of skew. On top
// of the library's checks (jwtClaims, keyFor): sub is required, exp, nbf
// and iat must be JSON numbers, and a header with "crit" is refused.
type jwtVerifier struct {
	key     crypto.PublicKey
	methods []string
	parser  *jwt.Parser
}

// newJWTVerifier reads the key (see ParsePublicKey) and builds the parser.
func newJWTVerifier(spec string, now func() time.Time) (*jwtVerifier, error) {
	key, err := ParsePublicKey(spec)
	if err != nil {
		return nil, err
	}
	var methods []string
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("the RSA key has %d bits: want 2048 or more", k.N.BitLen())
		}
		methods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
	case *ecdsa.PublicKey:
		// One algorithm per curve (RFC 7518 §3.4).
		switch k.Curve {
		case elliptic.P256():
			methods = []string{"ES256"}
		case elliptic.P384():
			methods = []string{"ES384"}
		case elliptic.P521():
			methods = []string{"ES512"}
		default:
			return nil, fmt.Errorf("the ECDSA key's curve %s has no JWT algorithm: want P-256, P-384 or P-521", k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
		methods = []string{"EdDSA"}
	default:
		return nil, fmt.Errorf("a %T key cannot verify JWTs: want RSA, ECDSA or Ed25519", key)
	}
	v := &jwtVerifier{key: key, methods: methods}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(methods),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(JWTLeeway),
	}
	if now != nil {
		opts = append(opts, jwt.WithTimeFunc(now))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// verify checks a compact JWT and returns its subject.
func (v *jwtVerifier) verify(tok string) (string, error) {
	var claims jwtClaims
	_, err := v.parser.ParseWithClaims(tok, &claims, v.keyFor)
	if err != nil {
		return "", err
	}
	return claims.Subject, nil
}

// errCrit refuses a token whose header has "crit": it lists extensions the
// recipient must understand, and aiod understands none (RFC 7515 §4.1.11).
var errCrit = errors.New(`the JWT's header has "crit", naming extensions aiod does not implement`)

// keyFor is the parser's key function: the algorithm was checked against
// v.methods already; the header's parameters are checked here.
func (v *jwtVerifier) keyFor(t *jwt.Token) (any, error) {
	if _, ok := t.Header["crit"]; ok {
		return nil, errCrit
	}
	return v.key, nil
}

// errNoSub refuses a token without a subject: the subject is the caller
// (Caller.Key), which per-caller limits count against.
var errNoSub = errors.New("the JWT has no sub claim: sub (a non-empty string) is required")

// claimTypeError is a time claim that is not a JSON number (RFC 7519
// NumericDate); golang-jwt would read "123" as well.
type claimTypeError struct{ name string }

func (e *claimTypeError) Error() string {
	return fmt.Sprintf("the JWT's %s claim is not a JSON number (seconds since 1970, RFC 7519 NumericDate)", e.name)
}

// jwtClaims are golang-jwt's registered claims with stricter types: exp,
// nbf and iat must be JSON numbers when present, and sub a non-empty
// string (Validate; a sub of another type fails decoding).
type jwtClaims struct {
	jwt.RegisteredClaims
}

func (c *jwtClaims) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	for _, name := range []string{"exp", "nbf", "iat"} {
		v, ok := raw[name]
		if !ok {
			continue
		}
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			return err
		}
		if _, isNum := x.(float64); !isNum {
			return &claimTypeError{name}
		}
	}
	return json.Unmarshal(b, &c.RegisteredClaims)
}

// Validate is golang-jwt's hook for claims of one's own, called after the
// time checks.
func (c *jwtClaims) Validate() error {
	if c.Subject == "" {
		return errNoSub
	}
	return nil
}

// jwtReason turns a verification error into a refusal reason that says
// what was wrong without echoing the token.
func jwtReason(err error, methods []string) string {
	var cte *claimTypeError
	switch {
	case errors.As(err, &cte):
		return cte.Error()
	case errors.Is(err, errCrit):
		return errCrit.Error() + " (RFC 7515 §4.1.11)"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "the bearer value is not a well-formed JWT"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		if strings.Contains(err.Error(), "signing method") {
			return "the JWT's alg is not accepted: want " + strings.Join(methods, ", ")
		}
		return "the JWT's signature does not verify with --jwt-public-key"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "the JWT has no exp claim: exp is required"
	case errors.Is(err, jwt.ErrTokenExpired):
		return fmt.Sprintf("the JWT has expired (exp is checked with %s of leeway)", JWTLeeway)
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "the JWT is not valid yet (nbf)"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "the JWT was issued in the future (iat)"
	case errors.Is(err, errNoSub):
		return errNoSub.Error()
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "the JWT cannot be verified: " + err.Error()
	}
	return "the JWT is not valid: " + err.Error()
}

// ParsePublicKey reads a public key given as PEM ("PUBLIC KEY" in PKIX
// form, "RSA PUBLIC KEY" in PKCS #1 form, or a "CERTIFICATE"), as the
// base64 of that PEM (how the AIO sandbox's JWT_PUBLIC_KEY is usually
// set), or as the base64 of the PKIX DER bytes. Literal "\n" sequences,
// which a PEM squeezed into one environment line often carries, count as
// line breaks.
func ParsePublicKey(spec string) (crypto.PublicKey, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, errors.New("empty public key")
	}
	if !strings.Contains(s, "\n") {
		s = strings.ReplaceAll(s, `\n`, "\n")
	}
	if strings.HasPrefix(s, "-----BEGIN") {
		return parsePEMKey([]byte(s))
	}
	raw, err := decodeBase64(s)
	if err != nil {
		return nil, errors.New("want a PEM public key or its base64: the value is neither PEM nor base64")
	}
	if t := strings.TrimSpace(string(raw)); strings.HasPrefix(t, "-----BEGIN") {
		return parsePEMKey([]byte(t))
	}
	k, err := x509.ParsePKIXPublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("the base64 value is neither a PEM key nor a DER public key: %v", err)
	}
	return k, nil
}

func decodeBase64(s string) ([]byte, error) {
	s = strings.Join(strings.Fields(s), "")
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

func parsePEMKey(b []byte) (crypto.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("the PEM block cannot be read")
	}
	switch blk.Type {
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("the PUBLIC KEY block: %v", err)
		}
		return k, nil
	case "RSA PUBLIC KEY":
		k, err := x509.ParsePKCS1PublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("the RSA PUBLIC KEY block: %v", err)
		}
		return k, nil
	case "CERTIFICATE":
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("the CERTIFICATE block: %v", err)
		}
		return c.PublicKey, nil
	}
	if strings.Contains(blk.Type, "PRIVATE") {
		return nil, fmt.Errorf("a %s was given: give the public key only", blk.Type)
	}
	return nil, fmt.Errorf("a %q PEM block is not a public key: want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE", blk.Type)
}
