package backend

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goccy/go-json"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/stream"
)

// ChdirCode is code that makes a runtime of lang work in dir.
func ChdirCode(lang, dir string) string {
	q, _ := json.Marshal(dir) // a JSON string is a valid Python and JavaScript literal
	if lang == Bash {
		return "cd -- " + ShellQuote(dir)
	}
	if lang == JS {
		// The driver's require resolves from the folder the REPL started
		// in; point it at the new one.
		return "process.chdir(" + string(q) + "); globalThis.require = require('module').createRequire(require('path').join(" + string(q) + ", '<repl>'))"
	}
	return "__import__('os').chdir(" + string(q) + ")"
}

// WithEnvCode is bash code that runs code with env (KEY=VALUE) exported,
// then puts each variable back as it was (unset when it was not set),
// ending with code's exit status.
func WithEnvCode(code string, env []string) string {
	var pre, post strings.Builder
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		n := strconv.Itoa(i)
		pre.WriteString("__aiod_s" + n + "=${" + k + "+x} __aiod_v" + n + "=${" + k + "-}; export " + k + "=" + ShellQuote(v) + "\n")
		post.WriteString("if [ -n \"$__aiod_s" + n + "\" ]; then " + k + "=$__aiod_v" + n + "; else unset " + k + "; fi; unset __aiod_s" + n + " __aiod_v" + n + "\n")
	}
	return pre.String() + "{ " + code + "\n}\n__aiod_rc=$?\n" + post.String() + "(exit $__aiod_rc)"
}

// ShellQuote quotes s as one bash word.
func ShellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// startIn makes every runtime b starts work in dir: right after the start,
// before the runtime is handed to its session, a silent execute (no
// execution count, no history, no output) changes its working directory.
// It wraps Start, so it composes with prewarm pools and restarts.
func startIn(b stream.Backend, dir string) stream.Backend {
	start := b.Start
	lang := b.Language
	b.Start = func(ctx context.Context, h jupyter.Handler) (jupyter.Runtime, error) {
		id := jupyter.NewID()
		var once sync.Once
		reply := make(chan string, 1)
		wrapped := func(m *jupyter.Message) {
			if m.Parent.MsgID != id {
				h(m)
				return
			}
			if m.Header.MsgType == jupyter.MsgExecuteReply {
				var c jupyter.ExecuteReplyContent
				_ = json.Unmarshal(m.Content, &c)
				st := c.Status
				if st != "ok" {
					st = fmt.Sprintf("%s %s: %s", c.Status, c.Ename, c.Evalue)
				}
				once.Do(func() { reply <- st })
			}
		}
		rt, err := start(ctx, wrapped)
		if err != nil {
			return nil, err
		}
		fail := func(why string) (jupyter.Runtime, error) {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = rt.Close(cctx)
			return nil, fmt.Errorf("change the working directory to %q: %s", dir, why)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := rt.Execute(wctx, jupyter.ExecuteRequest{MsgID: id, Code: ChdirCode(lang, dir), Silent: true, NoHistory: true}); err != nil {
			return fail(err.Error())
		}
		select {
		case st := <-reply:
			if st != "ok" {
				return fail(st)
			}
			return rt, nil
		case <-rt.Done():
			return fail(fmt.Sprintf("the runtime died (%v)", rt.Err()))
		case <-wctx.Done():
			return fail("no answer within 30 s")
		}
	}
	return b
}
