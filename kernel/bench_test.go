package kernel

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
)

// BenchmarkExecutePass measures one `pass` execution straight over zmq4:
// execute_request sent, then both execute_reply and the idle status with
// that parent received. It is the floor for the gateway's routes.
func BenchmarkExecutePass(b *testing.B) {
	spec, err := DefaultPythonSpec()
	if err != nil {
		b.Fatal(err)
	}
	type doneMsg struct {
		parent string
		reply  bool
	}
	events := make(chan doneMsg, 1024)
	handler := func(m *jupyter.Message) {
		var e doneMsg
		switch {
		case m.Header.MsgType == "execute_reply":
			e = doneMsg{m.Parent.MsgID, true}
		case m.Header.MsgType == "status" && bytes.Contains(m.Content, []byte(`"idle"`)):
			e = doneMsg{m.Parent.MsgID, false}
		default:
			return
		}
		select { // the jupyter.Handler must not block; the buffer is ample
		case events <- e:
		default:
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	k, err := Start(ctx, Options{Spec: spec, Handler: handler, StartTimeout: startTimeout})
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close(context.Background())

	b.ResetTimer()
	for b.Loop() {
		id := jupyter.NewID()
		if err := k.Execute(ctx, jupyter.ExecuteRequest{MsgID: id, Code: "pass", NoHistory: true}); err != nil {
			b.Fatal(err)
		}
		var reply, idle bool
		timeout := time.After(execTimeout)
		for !reply || !idle {
			select {
			case e := <-events:
				if e.parent == id {
					reply, idle = reply || e.reply, idle || !e.reply
				}
			case <-timeout:
				b.Fatalf("execution %s not complete within %s", id, execTimeout)
			}
		}
	}
}
