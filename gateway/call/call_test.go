package call

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/execution"
)

// A failure stored with an execution answers as the call's own did: the
// stored error gives back every field, and a failure stored as a plain
// error is mapped as the run path maps it.
func TestErrorRoundTrip(t *testing.T) {
	for _, ce := range []*Error{
		{Status: 503, Msg: "aiod is shutting down"},
		{Status: 429, Msg: "too many sessions", Kind: execution.KindAdmission, Retry: 7},
		{Status: 503, Msg: "no interpreter", Kind: execution.KindStart},
	} {
		var stored error = ce
		if got := ErrorOf(stored); *got != *ce {
			t.Errorf("round trip of %+v gave %+v", *ce, *got)
		}
	}
	if got := ErrorOf(stream.ErrShuttingDown); got.Status != 503 || got.Msg != stream.ErrShuttingDown.Error() {
		t.Errorf("a run refused at shutdown is stored as %+v", *got)
	}
}

// Admission refusals are said per kind: a session cap is the caller's
// (429), the start queue is aiod being busy (503); both carry their kind
// and when to retry.
func TestLimitErrorsMapToTheirStatus(t *testing.T) {
	for reason, want := range map[string]int{
		stream.RejectSessions: 429, stream.RejectSessionsKey: 429, stream.RejectQueueFull: 503, stream.RejectQueueWait: 503,
	} {
		e := MapError(&stream.LimitError{Reason: reason, Msg: "refused"}, Call{})
		if e.Status != want || e.Kind != execution.KindAdmission || e.Retry < 1 {
			t.Errorf("%s: %+v, want status %d, kind admission and a retry", reason, *e, want)
		}
	}
}

func FuzzParseExecute(f *testing.F) {
	c := &Core{Cfg: Config{DefaultTimeout: 30 * time.Second, MaxTimeout: 900 * time.Second}, Log: slog.New(slog.DiscardHandler)}
	for _, seed := range []string{
		`{"language":"python","code":"print(1)"}`, `{"language":"javascript","code":"1","session_id":null,"timeout":2.5}`,
		`{"language":1}`, `[]`, `null`, ``, `{"timeout":1e400}`, `{"code":"\ud800"}`, `{"session_id":"` + strings.Repeat("a", 200) + `"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		call, fe := c.ParseExecute(body)
		if fe == nil {
			if !KnownLanguage(call.Language) || call.Timeout <= 0 || call.Timeout > c.Cfg.MaxTimeout {
				t.Fatalf("accepted an invalid call: %+v", call)
			}
			return
		}
		if fe.Msg == "" {
			t.Fatalf("error without a message for %q", body)
		}
	})
}

// likeSessionID: misspellings of session_id are caught, other fields are
// not.
func TestLikeSessionID(t *testing.T) {
	for name, want := range map[string]bool{
		"sesion_id": true, "sessionId": true, "session-id": true, "SessionID": true, "session": true,
		"sid": true, "sesssion_id": true, "session_name": true, "sesionid": true,
		"workdir": false, "timeout_s": false, "language_id": false, "id": false, "version": false, "kernel": false,
	} {
		if got := likeSessionID(name); got != want {
			t.Errorf("likeSessionID(%q) = %v, want %v", name, got, want)
		}
	}
}
