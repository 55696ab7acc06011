package replbridge

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
)

// BenchmarkColdREPL: Start a REPL, run one print, Close.
func BenchmarkColdREPL(b *testing.B) {
	for _, lang := range langs {
		src := code{LangPython: "print(1)", LangJavaScript: "console.log(1)"}[lang]
		b.Run(lang, func(b *testing.B) {
			for b.Loop() {
				coldRun(b, lang, src)
			}
		})
	}
}

func coldRun(b *testing.B, lang, src string) {
	rec := newRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	r, err := Start(ctx, Options{Language: lang, Handler: rec.Handle, StartTimeout: waitLimit})
	if err != nil {
		b.Fatal(err)
	}
	h := &harness{t: b, r: r, rec: rec, lang: lang}
	if res := h.run(src); res.stdout != "1\n" {
		b.Fatalf("stdout %q", res.stdout)
	}
	if err := r.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkColdExec: the one-shot alternative, `node -e` / `python3 -c`.
func BenchmarkColdExec(b *testing.B) {
	for _, lang := range langs {
		var path string
		var args []string
		if lang == LangPython {
			path, _, _ = FindPython()
			args = []string{"-c", "print(1)"}
		} else {
			path, _, _ = FindNode()
			args = []string{"-e", "console.log(1)"}
		}
		b.Run(lang, func(b *testing.B) {
			for b.Loop() {
				out, err := exec.Command(path, args...).Output()
				if err != nil || string(out) != "1\n" {
					b.Fatalf("%s: %q %v", path, out, err)
				}
			}
		})
	}
}

// BenchmarkWarmExecute: one execute round trip (busy .. execute_reply) on a
// running REPL.
func BenchmarkWarmExecute(b *testing.B) {
	for _, lang := range langs {
		b.Run(lang, func(b *testing.B) {
			h := start(b, lang)
			h.ok("1")
			i := 0
			for b.Loop() {
				i++
				id := fmt.Sprintf("warm-%d", i)
				if err := h.r.Execute(context.Background(), jupyter.ExecuteRequest{MsgID: id, Code: "1 + 1"}); err != nil {
					b.Fatal(err)
				}
				h.await(id, 30*time.Second)
			}
		})
	}
}
