package guard

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// testKeys are generated once per test binary: RSA generation is slow
// under -race.
var testKeys = struct {
	rsa, rsa2 *rsa.PrivateKey
	ec        *ecdsa.PrivateKey
	ed        ed25519.PrivateKey
}{}

func init() {
	var err error
	if testKeys.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		panic(err)
	}
	if testKeys.rsa2, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		panic(err)
	}
	if testKeys.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		panic(err)
	}
	if _, testKeys.ed, err = ed25519.GenerateKey(rand.Reader); err != nil {
		panic(err)
	}
}

// pemPublic is the PKIX PEM of a private key's public half.
func pemPublic(t testing.TB, k crypto.Signer) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func sign(t testing.TB, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// signHeader signs claims with RS256 and extra header parameters.
func signHeader(t testing.TB, hdr map[string]any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	for k, v := range hdr {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(testKeys.rsa)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestJWTVerify: what golang-jwt checks (signature, algorithm, exp, nbf,
// iat) and what aiod adds on top: sub required, time claims that are JSON
// numbers, no "crit" header parameter.
func TestJWTVerify(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	rsaV, err := newJWTVerifier(pemPublic(t, testKeys.rsa), clock)
	if err != nil {
		t.Fatal(err)
	}
	ecV, err := newJWTVerifier(base64.StdEncoding.EncodeToString([]byte(pemPublic(t, testKeys.ec))), clock)
	if err != nil {
		t.Fatal(err)
	}
	exp := now.Add(5 * time.Minute).Unix()
	good := jwt.MapClaims{"sub": "agent-7", "exp": exp, "iat": now.Unix()}
	at := func(d time.Duration) int64 { return now.Add(d).Unix() }

	// alg "none", and HS256 keyed with the public key's PEM: the classic
	// algorithm-confusion forgery.
	none := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good)
	confused := sign(t, jwt.SigningMethodHS256, []byte(pemPublic(t, testKeys.rsa)), good)
	valid := sign(t, jwt.SigningMethodRS256, testKeys.rsa, good)
	parts := strings.Split(valid, ".")
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"admin","exp":9999999999}`)) + "." + parts[2]

	for _, tc := range []struct {
		name   string
		v      *jwtVerifier
		tok    string
		reason string // "" when it must verify
	}{
		{"RS256", rsaV, valid, ""},
		{"RS512", rsaV, sign(t, jwt.SigningMethodRS512, testKeys.rsa, good), ""},
		{"PS256", rsaV, sign(t, jwt.SigningMethodPS256, testKeys.rsa, good), ""},
		{"ES256", ecV, sign(t, jwt.SigningMethodES256, testKeys.ec, good), ""},
		{"expired within the leeway", rsaV, sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"sub": "x", "exp": at(-10 * time.Second)}), ""},
		{"expired", rsaV, sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"sub": "x", "exp": at(-time.Minute)}), "expired"},
		{"no exp", rsaV, sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"sub": "x"}), "no exp"},
		{"nbf in the future", rsaV, sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"exp": exp, "nbf": at(time.Minute)}), "not valid yet"},
		{"nbf within the leeway", rsaV, sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"sub": "x", "exp": exp, "nbf": at(10 * time.Second)}), ""},
		{"iat in the future", rsaV, sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"exp": exp, "iat": at(time.Hour)}), "issued in the future"},
		{"alg none", rsaV, none, "alg"},
		{"HS256 keyed with the public key", rsaV, confused, "alg"},
		{"signed by another key", rsaV, sign(t, jwt.SigningMethodRS256, testKeys.rsa2, good), "signature"},
		{"payload changed after signing", rsaV, tampered, "signature"},
		{"ES256 token on an RSA key", rsaV, sign(t, jwt.SigningMethodES256, testKeys.ec, good), "alg"},
		{"RS256 token on an EC key", ecV, valid, "alg"},
		{"unsigned", rsaV, parts[0] + "." + parts[1] + ".", "signature"},
		{"not a JWT", rsaV, "s3cret", "not a well-formed JWT"},
		{"no sub", rsaV, sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"exp": exp}), "no sub"},
		{"empty sub", rsaV, sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"sub": "", "exp": exp}), "no sub"},
		{"sub a number", rsaV, sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"sub": 7, "exp": exp}), "not a well-formed JWT"},
		{"exp a string", rsaV, sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"sub": "x", "exp": fmt.Sprint(exp)}), "exp claim is not a JSON number"},
		{"exp null", rsaV, sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"sub": "x", "exp": nil}), "exp claim is not a JSON number"},
		{"nbf a string", rsaV, sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"sub": "x", "exp": exp, "nbf": "0"}), "nbf claim is not a JSON number"},
		{"iat a string", rsaV, sign(t, jwt.SigningMethodRS256, testKeys.rsa, jwt.MapClaims{"sub": "x", "exp": exp, "iat": "0"}), "iat claim is not a JSON number"},
		{"crit header", rsaV, signHeader(t, map[string]any{"crit": []string{"exp"}}, good), `"crit"`},
		{"empty crit header", rsaV, signHeader(t, map[string]any{"crit": []string{}}, good), `"crit"`},
		{"another header parameter", rsaV, signHeader(t, map[string]any{"kid": "k1"}, good), ""},
		{"unknown alg", rsaV, base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"XX256","typ":"JWT"}`)) + "." + parts[1] + "." + parts[2], "cannot be verified"},
	} {
		sub, err := tc.v.verify(tc.tok)
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.reason == "" && tc.name == "RS256" && sub != "agent-7":
			t.Errorf("%s: subject %q", tc.name, sub)
		case tc.reason != "" && err == nil:
			t.Errorf("%s: accepted", tc.name)
		case tc.reason != "":
			if r := jwtReason(err, tc.v.methods); !strings.Contains(r, tc.reason) || strings.Contains(r, tc.tok) {
				t.Errorf("%s: reason %q, want it to mention %q and not the token (%v)", tc.name, r, tc.reason, err)
			}
		}
	}
}

func TestParsePublicKey(t *testing.T) {
	p := pemPublic(t, testKeys.rsa)
	der, _ := x509.MarshalPKIXPublicKey(testKeys.rsa.Public())
	pkcs1 := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&testKeys.rsa.PublicKey)}))
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "aiod test"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	certDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, testKeys.ec.Public(), testKeys.ec)
	if err != nil {
		t.Fatal(err)
	}
	cert := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}))
	privDER, _ := x509.MarshalPKCS8PrivateKey(testKeys.rsa)
	priv := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}))
	for _, tc := range []struct {
		name, spec string
		ok         bool
	}{
		{"PEM", p, true},
		{"PEM with spaces around", "  \n" + p + "\n ", true},
		{`PEM with literal \n`, strings.ReplaceAll(p, "\n", `\n`), true},
		{"base64 of the PEM", base64.StdEncoding.EncodeToString([]byte(p)), true},
		{"unpadded base64url of the PEM", base64.RawURLEncoding.EncodeToString([]byte(p)), true},
		{"base64 of the DER", base64.StdEncoding.EncodeToString(der), true},
		{"PKCS #1", pkcs1, true},
		{"certificate", cert, true},
		{"Ed25519", pemPublic(t, testKeys.ed), true},
		{"private key", priv, false},
		{"garbage", "not a key!", false},
		{"base64 of garbage", base64.StdEncoding.EncodeToString([]byte("hello")), false},
		{"empty", "  ", false},
	} {
		_, err := ParsePublicKey(tc.spec)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.name, err, tc.ok)
		}
		if err == nil {
			if _, err := newJWTVerifier(tc.spec, nil); err != nil {
				t.Errorf("%s: verifier: %v", tc.name, err)
			}
		}
	}
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	if _, err := newJWTVerifier(pemPublic(t, small), nil); err == nil || !strings.Contains(err.Error(), "2048") {
		t.Errorf("a 1024-bit RSA key: %v", err)
	}
}
