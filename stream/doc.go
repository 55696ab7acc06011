// Package stream is where executions happen: it owns every session (named
// ones and the temporary ones of one-shot calls) in a Registry, runs their
// calls one at a time in arrival order with timeouts, interrupts and
// restarts, and routes what their runtimes send.
//
// Each session has a Mux. The runtime's reader goroutines hand it every
// message; it decodes the message once (Event.Out, Event.State), folds it
// into the Collector of the execution it belongs to (the REST answer:
// outputs merged, clear_output and update_display_data applied, output kept
// within a budget of head and tail), and hands the same event to the
// execution's subscribers and to the session's watchers (WebSockets,
// Jupyter front ends), never blocking. An execution completes when both its
// execute_reply and its idle status arrived; its Result is published after
// every subscriber has the idle.
//
// Runtimes come from package backend through Backend.Start; stream sees
// them only as jupyter.Runtime and never imports a transport. Prewarm pools
// (Pool) keep started runtimes ready, and Counters keeps every count aiod
// keeps, in one place, for a metrics endpoint.
package stream
