// Package remote runs Jupyter kernels on a Jupyter server (Jupyter Server,
// Kernel Gateway, Enterprise Gateway on Kubernetes or YARN, or another
// aiod) through its REST API and kernel WebSocket, behind the same runtime
// interface as a local kernel.Kernel.
//
// # The server
//
// A Client names one server, AIO_JUPYTER_ENDPOINT =
// http(s)://host:port[/base], and its token, AIO_JUPYTER_TOKEN, sent as
// "Authorization: token …". Probe checks it: GET {base}/api answers the
// server's version (without auth on Jupyter Server), GET
// {base}/api/kernelspecs its kernelspecs (with auth, so a wrong token shows
// here as 403).
//
// # A kernel's life
//
// Start creates the kernel with POST {base}/api/kernels {"name", "env"}
// (201 with the model {id, name, ...}; on a cluster this may take
// minutes), opens the channels WebSocket
// {base}/api/kernels/{id}/channels?session_id=S, and sends
// kernel_info_request on shell until a kernel_info_reply comes back. S is
// a session id of aiod's own, kept for the kernel's life. From then on
// every message read is handed to the Handler, with its channel set.
// Execute writes execute_request on shell; the output comes back as for a
// local kernel (iopub status busy, execute_input, outputs, status idle;
// shell execute_reply), parented to the request's msg_id. Interrupt and
// Restart are REST calls (POST .../interrupt, 204; POST .../restart, 200),
// and Close is DELETE {base}/api/kernels/{id} (404: gone already).
//
// # Framing
//
// aiod offers the subprotocol v1.kernel.websocket.jupyter.org. A server
// that selects it (Debian's Jupyter Server 1.23 does) sends every message
// as one binary frame: u64le n, n u64le offsets, then the channel name,
// header, parent_header, metadata, content and buffers, offsets[0] being
// where the channel starts and offsets[i+1] where part i ends. A server
// that selects none (older servers, Enterprise Gateway, `jupyter server
// --gateway-url`, and any server run with ServerApp.kernel_ws_protocol set empty)
// speaks the legacy protocol: one JSON text frame per message with the
// channel under a "channel" key, or, when the message has buffers, a
// binary frame of u32be count n, n u32be offsets, the JSON, then the
// buffers.
//
// # Goroutines and failures
//
// Each socket has one reader, one writer (every send goes through it) and
// one pinger; run owns the socket and replaces it when it is lost. A
// socket is lost when a read or write fails or a ping is not answered
// within PingTimeout. run then dials again with the same session_id,
// with backoff, for up to ReconnectTimeout: Jupyter Server buffers the
// kernel's messages for a session whose socket closed and replays them
// when that session comes back, so an execution running across the drop
// completes. The server's replay may repeat a message aiod already has,
// so the reader drops any msg_id among the last 4096 seen. A message sent
// while no socket is open waits for the next one.
//
// A kernel ends with an error, never silently: when the channels socket is
// refused with 404, or the GET of its model, every CheckInterval, answers
// 404 or execution_state "dead", Err wraps ErrGone ("remote kernel ID is
// gone from ENDPOINT (culled or deleted)"). When the kernel process dies,
// Jupyter Server starts a new one and publishes status "restarting": the
// running execution will never be answered and the state is lost, so the
// Kernel ends too (ErrGone, "it died and the server restarted it") and
// deletes the restarted kernel, as a local kernel ends when its process
// dies. A restart whose status never reached aiod (its socket was down)
// shows in the next shell reply, signed with another process's session id
// than the last handshake's kernel_info_reply: the Kernel ends the same way. When the socket cannot be reopened for ReconnectTimeout, Err wraps
// ErrUnreachable and names the endpoint. The next call then needs a fresh
// kernel.
//
// # Latency
//
// Jupyter Server writes to the WebSocket without TCP_NODELAY, so each
// small message after the first of an execution waits for the ACK of the
// previous one, which Linux delays by up to 40 ms: 48 ms for a `pass`
// on loopback. The Client's own transport sets TCP_QUICKACK after every
// read (Linux), which brings it to 6-10 ms.
package remote
