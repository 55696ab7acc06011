// Drives aiod's Jupyter terminals API with @jupyterlab/services'
// TerminalManager, as JupyterLab's terminal does. Usage:
// node terminals_client.js BASE_URL TOKEN. Prints RESULT and JSON with what
// it saw; exits non-zero on a failed check.
'use strict';
const { TerminalManager, ServerConnection } = require('@jupyterlab/services');
const { PageConfig } = require('@jupyterlab/coreutils');
const WebSocket = require('ws');

function screen(conn) {
  const s = { text: '' };
  conn.messageReceived.connect((_, msg) => {
    if (msg.type === 'stdout') s.text += msg.content[0];
  });
  return s;
}

async function until(what, s, pred, ms = 20000) {
  const end = Date.now() + ms;
  while (!pred(s.text)) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}; screen:\n${s.text.slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function connected(conn) {
  const end = Date.now() + 20000;
  while (conn.connectionStatus !== 'connected') {
    if (Date.now() > end) throw new Error('terminal socket never connected: ' + conn.connectionStatus);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const stdin = (conn, text) => conn.send({ type: 'stdin', content: [text] });

async function main() {
  const [baseUrl, token] = process.argv.slice(2);
  PageConfig.setOption('terminalsAvailable', 'true'); // what the server's page config says in JupyterLab
  const serverSettings = ServerConnection.makeSettings({
    baseUrl, wsUrl: 'ws' + baseUrl.slice(4), token, appendToken: true, WebSocket,
  });
  const manager = new TerminalManager({ serverSettings });
  await manager.ready;
  const out = {};

  const conn = await manager.startNew();
  out.name = conn.name;
  await connected(conn);
  const s = screen(conn);
  stdin(conn, 'tty\n');
  await until('tty', s, (t) => /\/dev\/pts\/\d+/.test(t));
  out.tty = s.text.match(/\/dev\/pts\/\d+/)[0];

  conn.send({ type: 'set_size', content: [33, 101, 500, 800] });
  await new Promise((r) => setTimeout(r, 100));
  stdin(conn, 'stty size\n');
  await until('stty size', s, (t) => t.includes('33 101'));
  out.size = '33 101';

  stdin(conn, 'export KEEP=kept; sleep 100; echo not-reached\n');
  await new Promise((r) => setTimeout(r, 400));
  const t0 = Date.now();
  stdin(conn, '\x03');
  stdin(conn, 'echo after-$((2+3))\n');
  await until('the prompt after Ctrl-C', s, (t) => t.includes('after-5'), 3000);
  out.interruptMs = Date.now() - t0;
  out.notReached = /\nnot-reached/.test(s.text);

  // Drop the socket without ending the terminal, then attach again.
  conn.dispose();
  const again = manager.connectTo({ model: { name: out.name } });
  const s2 = screen(again);
  await connected(again);
  stdin(again, 'echo "still $KEEP"\n');
  await until('the kept shell', s2, (t) => t.includes('still kept'));
  out.replayed = s2.text.includes('after-5');
  out.kept = true;

  await manager.refreshRunning();
  out.runningBefore = Array.from(manager.running()).map((m) => m.name);
  await again.shutdown();
  await manager.refreshRunning();
  out.runningAfter = Array.from(manager.running()).map((m) => m.name);
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
    console.error(err && err.stack ? err.stack : String(err));
    process.exit(1);
  },
);
