package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// The access log's writer loses no line: not those handed over while it
// stops (more than its queue holds, from many requests at once), not those
// before it starts or after it stopped, which the request writes itself.
func TestAccessWriterLosesNoLine(t *testing.T) {
	t.Parallel()
	var buf syncLog
	w := newAccessWriter(slog.New(slog.NewTextHandler(&buf, nil)))
	line := func(i int) accessLine {
		return accessLine{method: "POST", route: fmt.Sprintf("/r/%d", i), status: 200, size: i, took: time.Millisecond}
	}
	w.put(line(-1)) // before start: written by the caller
	if !strings.Contains(buf.String(), "route=/r/-1 ") {
		t.Fatalf("a line before start was not written at once: %q", buf.String())
	}
	w.start()
	const workers, each = 8, 2 * accessQueue / 8
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := range each {
				w.put(line(g*each + i))
			}
		})
	}
	time.Sleep(time.Millisecond) // let some hand-overs be in flight when stop begins
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.stop(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	w.put(line(-2)) // after stop: written by the caller
	out := buf.String()
	for i := -2; i < workers*each; i++ {
		if n := strings.Count(out, fmt.Sprintf("route=/r/%d ", i)); n != 1 {
			t.Fatalf("line %d written %d times", i, n)
		}
	}
	if !strings.Contains(out, `level=INFO msg=http method=POST route=/r/3 status=200 ms=1 bytes=3`) {
		t.Errorf("line format: %q", out[:min(len(out), 300)])
	}
	if err := w.stop(ctx); err != nil { // a second stop is harmless
		t.Fatal(err)
	}
}
