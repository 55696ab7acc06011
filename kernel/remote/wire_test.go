package remote

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/aiod/aiod/kernel/jupyter"
)

func TestIDSet(t *testing.T) {
	t.Parallel()
	s := newIDSet(3)
	for _, id := range []string{"a", "b", "c"} {
		if !s.add(id) {
			t.Fatalf("add(%q) = false on first sight", id)
		}
	}
	if s.add("a") || s.add("c") {
		t.Error("a repeat was taken as new")
	}
	s.add("d") // evicts a
	if !s.add("a") {
		t.Error("an evicted id was taken as a repeat")
	}
	if len(s.set) != 3 {
		t.Errorf("set holds %d ids, want 3", len(s.set))
	}
}

// A message replayed after a reconnect reaches the Handler once.
func TestDispatchDropsRepeats(t *testing.T) {
	t.Parallel()
	c, _ := NewClient("http://127.0.0.1:1", "")
	var got []string
	opts := Options{Client: c, Handler: func(m *jupyter.Message) { got = append(got, m.Header.MsgID) }}
	opts.setDefaults()
	k := newKernel(opts, KernelModel{ID: "k"})
	defer k.cancelLife()
	k.ready.Store(true)
	for _, id := range []string{"a", "b", "a", "c", "b"} {
		k.dispatch(&jupyter.Message{Channel: "iopub", Header: jupyter.Header{MsgID: id}})
	}
	if want := []string{"a", "b", "c"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Handler got %v, want %v", got, want)
	}
	if st := k.Stats(); st.Duplicates != 2 {
		t.Errorf("Stats() = %+v, want 2 duplicates", st)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	base := errors.New(`Get "ws://h/api?token=s3cret": refused`)
	err := redact(base, "s3cret")
	if strings.Contains(err.Error(), "s3cret") || !errors.Is(err, base) {
		t.Errorf("redact: %v", err)
	}
}
