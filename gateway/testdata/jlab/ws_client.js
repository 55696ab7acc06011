// A plain Node.js client of aiod's /v2/code/ws (node 20 has no global
// WebSocket, so it uses the ws package). Usage:
//   node ws_client.js WS_URL CODE [GATE]
// It runs CODE once, one-shot, and prints one JSON line: every message
// received with its arrival time in ms since the request was sent. With
// GATE, it makes that file when the first output arrives (the test's code
// waits for it: proof that output streams while the code runs).
'use strict';
const fs = require('fs');
const WebSocket = require('ws');

const [url, code, gate] = process.argv.slice(2);
const ws = new WebSocket(url);
const t0 = process.hrtime.bigint();
const msgs = [];
const timer = setTimeout(() => {
  console.error('timed out waiting for the result');
  process.exit(2);
}, 120000);

ws.on('open', () => {
  ws.send(JSON.stringify({ type: 'execute', id: 'node-1', language: 'python', code }));
});
ws.on('message', (data, isBinary) => {
  const at = Number(process.hrtime.bigint() - t0) / 1e6;
  const m = JSON.parse(data.toString());
  msgs.push({ at, m, binary: isBinary });
  if (gate && m.type === 'output' && !fs.existsSync(gate)) {
    fs.writeFileSync(gate, '');
  }
  if (m.type === 'result' && m.id === 'node-1') {
    clearTimeout(timer);
    ws.close(1000, 'done');
  }
});
ws.on('close', () => {
  console.log(JSON.stringify(msgs));
});
ws.on('error', (err) => {
  console.error('websocket error:', err.message);
  process.exit(1);
});
