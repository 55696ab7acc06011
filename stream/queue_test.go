package stream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
)

func TestQueueClosesSlowConsumerButKeepsControl(t *testing.T) {
	q := NewQueue(4096)
	big := streamMsg(t, "stdout", strings.Repeat("y", 1500))
	idle := iopub(t, "status", map[string]string{"execution_state": "idle"})
	q.Deliver(Event{Msg: big})
	q.Deliver(Event{Msg: idle}) // control: exempt from the byte limit
	q.Deliver(Event{Msg: big})
	if err := q.Err(); err != nil {
		t.Fatalf("closed too early: %v", err)
	}
	q.Deliver(Event{Msg: big}) // passes 4096 bytes
	if err := q.Err(); !errors.Is(err, ErrSlowConsumer) || !strings.Contains(err.Error(), "4.0 KiB") {
		t.Fatalf("err = %v, want a slow-consumer error naming the limit", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var types []string
	for {
		e, err := q.Next(ctx)
		if err != nil {
			if !errors.Is(err, ErrSlowConsumer) {
				t.Fatalf("Next err = %v", err)
			}
			break
		}
		types = append(types, e.Msg.Header.MsgType)
	}
	if strings.Join(types, ",") != "stream,status,stream" {
		t.Fatalf("drained %v", types)
	}
}

func TestQueueNextWaitsAndHonoursContext(t *testing.T) {
	q := NewQueue(1 << 20)
	go func() {
		time.Sleep(20 * time.Millisecond)
		q.Deliver(Event{Msg: &jupyter.Message{Header: jupyter.Header{MsgType: "stream"}}})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := q.Next(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if _, err := q.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
}
