package gateway

import (
	"github.com/aiod/aiod/gateway/wsock"
	"github.com/aiod/aiod/stream"
)

// Test hooks: what the tests reach that the daemon does not need.

// Registry is the session registry.
func (s *Server) Registry() *stream.Registry { return s.reg }

// LiveStats counts closed WebSockets, dropped messages and refused
// upgrades by reason, e.g. "close:slow_consumer" or "drop:socket_closed":
// a view of the registry's counters (closes summed over both routes).
func (s *Server) LiveStats() map[string]int64 {
	out := map[string]int64{}
	prefix := map[string]string{wsock.Closes: "close:", wsock.Drops: "drop:", wsock.Refused: "refused:"}
	for _, c := range s.reg.Counters().Snapshot() {
		if p, ok := prefix[c.Name]; ok {
			label := c.Label
			if c.Name == wsock.Closes {
				label = stream.SplitLabels(label, 2)[1]
			}
			out[p+label] += c.Value
		}
	}
	return out
}
