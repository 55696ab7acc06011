package torture

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/aiod/aiod/gateway"
	"github.com/aiod/aiod/gateway/gatewaytest"
	"github.com/aiod/aiod/kernel/kerneltest"
	"github.com/aiod/aiod/stream/backend"
)

func TestMain(m *testing.M) { os.Exit(kerneltest.Run(m)) }

// TestTortureShort is aiobench torture's short form, in this process (so
// under the race detector when the tests are): a gateway under tenant
// isolation with JWT tenants, eight callers (one measured, one hostile) on
// every surface for 40 s. Nothing may fail, no panic may be logged, every
// surface answers afterwards and the levels come back. The measured
// tenant's latency is logged, not asserted.
func TestTortureShort(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(pub)
	var logs kerneltest.SyncBuffer
	first, last := kerneltest.UIDRange(t)
	const admin = "torture-admin"
	srv := gatewaytest.Start(t, gateway.Config{
		Token: admin, JWTPublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})),
		Isolation:          backend.Isolation{MemoryBytes: 1 << 30, Pids: 512, FirstUID: first, LastUID: last},
		Logger:             slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		ExecutionRetention: 10 * time.Second,
	})
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	var progress kerneltest.SyncBuffer
	rep, err := Run(ctx, Config{
		URL: srv.URL, DaemonPID: os.Getpid(), Admin: admin, FirstUID: first, LastUID: last,
		Token: func(sub string) string {
			s, _ := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(priv)
			return s
		},
		Duration: 40 * time.Second, Quiet: 5 * time.Second, Callers: 8, Hostile: 1, Log: &progress,
		Settle:  60 * time.Second,
		ForceGC: func(context.Context) error { runtime.GC(); return nil },
	})
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ok %v\nrefused %v\nmeasured alone p50 %.1f ms p99 %.1f ms; under torture p50 %.1f ms p99 %.1f ms",
		rep.OK, rep.Refused, rep.Quiet.P50, rep.Quiet.P99, rep.Under.P50, rep.Under.P99)
	if len(rep.Failures) > 0 {
		t.Errorf("failures %v:\n%s", rep.Failures, strings.Join(rep.Examples, "\n"))
	}
	if !rep.Settled {
		t.Errorf("levels before %+v, peak %+v, after %+v: not back", rep.Before, rep.Peak, rep.After)
	}
	for name, st := range rep.Surfaces {
		if st < 200 || st > 299 {
			t.Errorf("after the torture, %s answered %d", name, st)
		}
	}
	if l := logs.String(); strings.Contains(strings.ToLower(l), "panic") {
		t.Errorf("a panic was logged:\n%s", l)
	}
}
