// Package kernel runs Jupyter kernels and speaks the Jupyter messaging
// protocol (version 5.3) to them over ZeroMQ, using go-zeromq/zmq4. The
// message model it carries (jupyter.Message, the Runtime interface *Kernel
// implements, DeadError) is package kernel/jupyter's.
//
// # Finding kernels
//
// A kernelspec is a folder holding a kernel.json: the command line that
// starts the kernel, its language, its interrupt mode and extra
// environment. FindSpecs reads the folders of SpecDirs (JUPYTER_PATH, the
// user's data folder, /usr/local/share/jupyter, /usr/share/jupyter), the
// first folder winning for each name. Kernels are always found this way,
// never through PATH: the python3 on PATH may lack ipykernel.
//
// # Starting a kernel
//
// Start makes a private temporary folder (mode 0700) and writes a
// connection file there (mode 0600) with a random signing key and five
// sockets: for an ipykernel spec, Unix sockets in that folder (transport
// ipc), else five free loopback TCP ports (see Options.Transport). It then
// starts the kernel process in a process group (a session, when forked) of
// its own, so that signals reach the kernel and anything it spawned:
//
//   - spawn: the spec's argv with {connection_file} substituted;
//   - fork (Options.Templates, for a spec whose argv is the standard
//     ipykernel launcher): the spec's template process, a warm Python that
//     has imported ipykernel and the preload list, forks a child that runs
//     the same kernel app (see template.go and driver/template.py). A start
//     the template cannot serve is spawned.
//
// The kernel binds the five sockets; aiod dials them:
//
//   - shell (DEALER): requests such as execute_request and their replies;
//   - control (DEALER): shutdown_request and interrupt_request, served even
//     while shell is busy;
//   - stdin (DEALER): input_request from the kernel; it shares shell's
//     routing identity because the kernel addresses input requests to the
//     client that sent the execute_request;
//   - iopub (SUB, subscribed to everything): everything the kernel
//     publishes: status busy/idle, execute_input, stream output,
//     display_data, execute_result, error;
//   - heartbeat (DEALER): the kernel echoes whatever it receives.
//
// A PUB socket drops what it publishes before a subscriber's subscription
// has reached it (the "slow joiner"). Start therefore repeats
// kernel_info_request on shell every 200 ms until it has both the
// kernel_info_reply and some message on iopub; only then is the kernel
// returned and the Handler starts receiving messages.
//
// # Messages on the wire
//
// Each message is a list of ZeroMQ frames: routing identities (on iopub,
// one topic frame), the delimiter "<IDS|MSG>", the signature, then four
// JSON parts (header, parent_header, metadata, content) and optional
// binary buffers. The signature is the lowercase hex HMAC-SHA256 of the
// four JSON parts with the connection file's key. Messages whose signature
// does not match are dropped and counted (Stats), never delivered.
//
// # One execution
//
// Execute sends execute_request on shell with the caller's msg_id. The
// kernel then publishes on iopub, each with that msg_id as parent:
// status busy, execute_input, any output (stream, display_data,
// execute_result, error, ...), status idle; and it answers execute_reply
// on shell. The execution is complete when both the execute_reply and the
// idle status have arrived; they come on different sockets, in either
// order.
//
// # Goroutines and sockets
//
// Every socket has exactly one reader goroutine, which reads for the
// socket's whole life and hands each message to the Handler without
// blocking (zmq4 leaks goroutines when a socket is not read, and the
// kernel's PUB drops messages for a slow reader). Every socket aiod writes
// to has one writer goroutine; callers wait for it with their context.
//
// # Interrupt, shutdown and death
//
// Interrupt sends SIGINT to the kernel's process group (interrupt_mode
// "signal", ipykernel's default) or interrupt_request on control
// (interrupt_mode "message"). Close sends shutdown_request on control,
// then SIGTERM, then SIGKILL, each after a grace period.
//
// zmq4 does not report a dead peer usefully (a read returns EOF once and
// then blocks; a send to nobody succeeds), so death is detected from the
// process itself, by the one goroutine that waits for it (cmd.Wait for a
// spawned kernel; for a forked one, the template's report of how it ended,
// backed by a pidfd), and from the heartbeat: a kernel that leaves pings unanswered for HeartbeatTimeout
// is killed. Either way the Kernel tears itself down (sockets closed,
// goroutines ended, connection file removed), closes Done, and Err returns
// a *DeadError naming the cause.
package kernel
