// Drives aiod's Jupyter kernels API with @jupyterlab/services, as JupyterLab
// does. Usage: node jlab_client.js BASE_URL TOKEN v1|legacy
// "legacy" hands the library a WebSocket class that offers no subprotocol,
// which forces the legacy JSON framing; "v1" lets it negotiate
// v1.kernel.websocket.jupyter.org. Prints one line, RESULT and JSON, with what it saw (the library logs too).
'use strict';
const { KernelManager, ServerConnection } = require('@jupyterlab/services');
const WebSocket = require('ws');

class LegacyWebSocket extends WebSocket {
  constructor(url, _protocols, options) {
    super(url, [], options);
  }
}

async function main() {
  const [baseUrl, token, mode] = process.argv.slice(2);
  const serverSettings = ServerConnection.makeSettings({
    baseUrl,
    wsUrl: 'ws' + baseUrl.slice(4),
    token,
    appendToken: true,
    WebSocket: mode === 'legacy' ? LegacyWebSocket : WebSocket,
  });
  const manager = new KernelManager({ serverSettings });
  await manager.ready;
  const kernel = await manager.startNew({ name: 'python3' });
  const info = await kernel.info;
  const iopub = [];
  const future = kernel.requestExecute({ code: "print('hello from jlab', flush=True)\n6*7" });
  future.onIOPub = (msg) => {
    const c = msg.content;
    iopub.push({
      type: msg.header.msg_type,
      text: c.text,
      state: c.execution_state,
      data: c.data && c.data['text/plain'],
      parent: msg.parent_header.msg_id === future.msg.header.msg_id,
    });
  };
  const reply = await future.done;
  const out = {
    id: kernel.id,
    protocol: kernel._ws ? kernel._ws.protocol : null,
    implementation: info.implementation,
    reply: reply.content.status,
    iopub,
  };
  await kernel.shutdown();
  manager.dispose();
  console.log('RESULT ' + JSON.stringify(out));
}

const timer = setTimeout(() => {
  console.error('timed out');
  process.exit(2);
}, 120000);
main().then(
  () => clearTimeout(timer),
  (err) => {
    console.error('failed:', err && err.stack ? err.stack : err);
    process.exit(1);
  },
);
