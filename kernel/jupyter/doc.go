// Package jupyter is the Jupyter messaging protocol (version 5.3) as aiod
// speaks it, whatever carries the messages: the message model, the message
// and channel names, typed contents, ids and dates, both WebSocket framings
// of Jupyter Server's kernel channels socket, and the Runtime interface that
// every runtime (a Jupyter kernel over ZeroMQ, a kernel on a remote Jupyter
// server, a native REPL) implements.
//
// It is a leaf: it imports nothing of aiod's and no transport. Package
// kernel carries these messages over ZeroMQ, package kernel/remote over a
// Jupyter Server's REST API and WebSocket, package replbridge emits them
// from native REPL processes, and package stream routes and folds them.
//
// # One execution
//
// A client sends execute_request on shell with a msg_id of its choosing.
// The runtime then publishes on iopub, each with that msg_id as parent:
// status busy, execute_input, any output (stream, display_data,
// execute_result, error, clear_output, update_display_data), status idle;
// and it answers execute_reply on shell. The execution is complete when
// both the reply and the idle status have arrived; they come on different
// channels, in either order.
package jupyter
