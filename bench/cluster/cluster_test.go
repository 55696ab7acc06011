package cluster

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/kerneltest"
)

func TestMain(m *testing.M) { os.Exit(kerneltest.Run(m)) }

// A short run: both paths answered, every forwarded call by the home.
// Its times are reported, not judged.
func TestForwardedCallsAnswered(t *testing.T) {
	kerneltest.SkipShort(t, "a cluster of daemons")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := Run(ctx, Config{Rounds: 20})
	if err != nil {
		t.Fatal(err)
	}
	if r.Rounds != 20 || r.HomeP50 <= 0 || r.ForwardedP50 <= 0 || !r.ForwardedByHome {
		t.Fatalf("report: %+v", r)
	}
	t.Logf("home p50 %.2f ms, forwarded p50 %.2f ms (%+.2f ms)", r.HomeP50, r.ForwardedP50, r.AddedP50)
}
