package remote

import "time"

// DropConnection closes the kernel's channels socket abruptly, as a
// network failure would, and reports whether one was open. The kernel
// reconnects with the same session id, not before outage has passed.
func (k *Kernel) DropConnection(outage time.Duration) bool { return k.dropConnection(outage) }
