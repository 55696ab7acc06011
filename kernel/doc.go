// Package kernel runs Jupyter kernels and speaks the Jupyter messaging
// protocol (version 5.3) to them over ZeroMQ, using go-zeromq/zmq4. The
// message model it carries (jupyter.Message, the Runtime interface *Kernel
// implements, DeadError) is package kernel/jupyter's.
//
// # Finding kernels
//
// A kernelspec is a folder holding a kernel.json (command line, language,
// interrupt mode, environment). FindSpecs reads SpecDirs (JUPYTER_PATH, the
// user's, /usr/local/share/jupyter, /usr/share/jupyter), the first winning
// for each name; never PATH, whose python3 may lack ipykernel.
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
//   - fork (Options.Templates, standard ipykernel launcher specs): the
//     spec's warm template process forks a child that runs the same kernel
//     app (template.go, driver/template.py); what it cannot serve is spawned.
//
// Both get aiod's ipykernel patches (driver/patches.py). The kernel binds
// the five sockets; aiod dials them:
//
//   - shell (DEALER): requests such as execute_request and their replies;
//   - control (DEALER): shutdown_request and interrupt_request;
//   - stdin (DEALER): input_request, on shell's routing identity;
//   - iopub (SUB, subscribed to everything): everything the kernel
//     publishes: status busy/idle, execute_input, stream output,
//     display_data, execute_result, error;
//   - heartbeat (DEALER): the kernel echoes whatever it receives.
//
// Against PUB's "slow joiner", Start repeats kernel_info_request every
// 200 ms until it has the reply and some message on iopub.
//
// Messages are frames of routing identities, "<IDS|MSG>", the HMAC-SHA256
// signature and four JSON parts (wire.go); a bad signature is dropped and
// counted. An execution is complete once its execute_reply (shell) and its
// idle status (iopub) have both arrived, in either order.
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
