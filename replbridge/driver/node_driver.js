// node_driver.js: the replbridge driver for Node.js. It is started by
// replbridge (Go) with the command pipe on fd 3 and the control pipe on
// fd 4; fd 1 and 2 are the real stdout/stderr pipes. Protocol:
//   fd 3, in:  one JSON object per line {"code", "token", "silent"}, or
//              {"type":"complete"|"inspect","id","code","cursor_pos","detail_level"}.
//   fd 4, out: {"type":"ready","version"} once, then per command
//              {"type":"done","status","result"?,"error"?{ename,evalue,traceback}}
//              written after the end marker ("\0aiod:end:"+token+"\0") has
//              been written to fd 1 and fd 2; for complete and inspect,
//              {"type":"complete_reply","id","matches","cursor_start","cursor_end"} or
//              {"type":"inspect_reply","id","found","text"}, at once (they do
//              not wait for a cell that awaits; synchronous code delays them).
'use strict';
const fs = require('fs');
const net = require('net');
const path = require('path');
const readline = require('readline');
const util = require('util');
const vm = require('vm');
const { Console } = require('console');
const { createRequire } = require('module');

// awaitTransform returns Node's own REPL transform for top-level await
// (needs --expose-internals), loaded on first use since it pulls in a parser:
// it hoists declarations and returns the last expression's value. null when
// this Node has none.
let transformAwait;
function awaitTransform() {
  if (transformAwait === undefined) {
    try {
      transformAwait = require('internal/repl/await').processTopLevelAwait;
    } catch (_) {
      transformAwait = null;
    }
  }
  return transformAwait;
}

const INTERRUPTED = 'Script execution was interrupted by SIGINT';

// fdWriter writes to fd at once (fs.writeSync): the cells' console holds
// no stream state. An interrupt stops a cell with V8's TerminateExecution,
// which can land inside console.log; in the middle of a Writable stream's
// write it left process.stdout writing for ever, and the cell's end marker,
// written after it, never came (seen once in a few dozen interrupts
// landing right after a print).
function fdWriter(fd) {
  return {
    write(chunk, encoding, cb) {
      if (typeof encoding === 'function') cb = encoding;
      const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      for (let off = 0; off < buf.length;) {
        try {
          off += fs.writeSync(fd, buf, off);
        } catch (err) {
          if (err.code !== 'EAGAIN') throw err;
        }
      }
      if (typeof cb === 'function') process.nextTick(cb, null);
      return true;
    },
    // Console listens for a stream's errors around each write; these
    // writes throw theirs.
    once() { return this; },
    on() { return this; },
    removeListener() { return this; },
    listenerCount() { return 0; },
  };
}

function makeContext() {
  const sandbox = {};
  const ctx = vm.createContext(sandbox);
  const own = new Set(vm.runInContext('Object.getOwnPropertyNames(globalThis)', ctx));
  for (const name of Object.getOwnPropertyNames(globalThis)) {
    if (own.has(name) || name === 'console') continue;
    const desc = Object.getOwnPropertyDescriptor(globalThis, name);
    if (desc) Object.defineProperty(sandbox, name, desc);
  }
  sandbox.console = new Console({ stdout: fdWriter(1), stderr: fdWriter(2) });
  sandbox.require = createRequire(path.join(process.cwd(), '<repl>'));
  sandbox.module = { exports: {} };
  sandbox.exports = sandbox.module.exports;
  return ctx;
}

const context = makeContext();

// completer is Node's own REPL completer, pointed at the cells' context; it
// is made on first use, with streams that go nowhere.
let replServer = null;
function completer() {
  if (!replServer) {
    const { PassThrough } = require('stream');
    replServer = require('repl').start({ input: new PassThrough(), output: new PassThrough(), terminal: false, prompt: '' });
    replServer.context = context;
  }
  return replServer;
}

// codeUnits maps a cursor in code points (the Jupyter protocol's) to one in
// UTF-16 code units (JavaScript strings'), and back.
function toUnits(code, points) {
  let units = 0;
  for (const ch of code) {
    if (points-- <= 0) break;
    units += ch.length;
  }
  return units;
}
function toPoints(code, units) { return [...code.slice(0, units)].length; }

function complete(cmd) {
  const code = cmd.code;
  const pos = toUnits(code, cmd.cursor_pos || 0);
  const line = code.slice(0, pos).split('\n').pop();
  return new Promise((resolve) => {
    completer().complete(line, (err, res) => {
      const [matches, sub] = err || !res ? [[], ''] : res;
      const end = toPoints(code, pos);
      resolve({ matches: matches.filter((m) => m), cursor_start: end - [...sub].length, cursor_end: end });
    });
  });
}

function inspect(cmd) {
  const code = cmd.code;
  const pos = toUnits(code, cmd.cursor_pos || 0);
  const name = ((code.slice(0, pos).match(/[\w$.]*$/) || [''])[0] + (code.slice(pos).match(/^[\w$]*/) || [''])[0]).replace(/^\.+|\.+$/g, '');
  if (!name) return { found: false };
  let value;
  try {
    value = vm.runInContext(name, context, { timeout: 1000 }); // a dotted name only: no calls
  } catch (_) {
    return { found: false };
  }
  let text = util.inspect(value, { depth: cmd.detail_level ? 2 : 0 });
  if (typeof value === 'function') {
    const src = Function.prototype.toString.call(value);
    text = (cmd.detail_level ? src : src.split('\n')[0]) + '\n' + text;
  }
  return { found: true, text: name + ': ' + typeof value + '\n' + text };
}

async function ask(cmd) {
  let reply;
  try {
    reply = cmd.type === 'complete' ? await complete(cmd) : inspect(cmd);
  } catch (_) {
    reply = { matches: [], cursor_start: cmd.cursor_pos || 0, cursor_end: cmd.cursor_pos || 0, found: false };
  }
  send(Object.assign(reply, { type: cmd.type + '_reply', id: cmd.id }));
}
let cellNo = 0;
let abortAsync = null; // rejects the awaited cell on SIGINT
let interrupted = false; // a cell of this REPL has been interrupted

process.on('SIGINT', () => {
  interrupted = true;
  if (abortAsync) abortAsync(interruptedError());
});
process.on('unhandledRejection', (reason) => {
  process.stderr.write('Uncaught (in promise) ' + describeValue(reason) + '\n');
});
process.on('uncaughtException', (err) => {
  process.stderr.write('Uncaught ' + describeValue(err) + '\n');
});

function interruptedError() {
  const e = new Error(INTERRUPTED);
  e.code = 'ERR_SCRIPT_EXECUTION_INTERRUPTED';
  return e;
}

function describeValue(v) {
  if (v && typeof v === 'object' && typeof v.stack === 'string') return v.stack;
  return util.inspect(v);
}

// compile returns {script, async} for code, preferring an object literal
// reading of "{...}" and Node's top-level-await transform when needed.
function compile(code, filename) {
  const opts = { filename };
  if (/^\s*\{/.test(code) && /\}\s*$/.test(code)) {
    try {
      return { script: new vm.Script('(' + code + '\n)', opts), async: false };
    } catch (_) { /* not an object literal */ }
  }
  if (/\bawait\b/.test(code) && awaitTransform()) {
    let wrapped = null;
    try {
      wrapped = transformAwait(code);
    } catch (_) { /* a syntax error: let V8 report it below */ }
    if (wrapped) return { script: new vm.Script(wrapped, opts), async: true };
  }
  try {
    return { script: new vm.Script(code, opts), async: false };
  } catch (err) {
    if (!(err instanceof SyntaxError) || !/\bawait\b/.test(code)) throw err;
    const wrapped = '(async () => {\n' + code + '\n})().then(() => ({ value: undefined }))';
    try {
      return { script: new vm.Script(wrapped, opts), async: true };
    } catch (_) {
      throw err; // the error about the user's code, not about the wrapper
    }
  }
}

// evaluate runs one cell and resolves to {value}: boxed, so that a promise
// the cell evaluates to is shown, not awaited.
async function evaluate(code) {
  cellNo += 1;
  const { script, async } = compile(code, `cell-${cellNo}`);
  const value = script.runInContext(context, { breakOnSigint: true, displayErrors: false });
  if (!async) return { value };
  const box = await new Promise((resolve, reject) => {
    abortAsync = reject;
    value.then(resolve, reject);
  }).finally(() => { abortAsync = null; });
  return box || { value: undefined };
}

function errorFields(err) {
  if (err && typeof err === 'object') {
    let ename = (err.constructor && err.constructor.name) || 'Error';
    if (err.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') ename = 'Interrupted';
    const evalue = String(err.message === undefined ? err : err.message);
    const stack = typeof err.stack === 'string' ? err.stack : `${ename}: ${evalue}`;
    const traceback = stack.split('\n').filter((l) => !/\(node:|at node:|\[eval\]/.test(l));
    return { ename, evalue, traceback };
  }
  const evalue = util.inspect(err);
  return { ename: 'Error', evalue, traceback: ['Uncaught ' + evalue] };
}

// writeMarker writes the end marker after everything the cell wrote to
// stream: at once when the stream holds nothing back, else behind what it
// holds (a pipe aiod reads slowly fills, and process.stdout then queues).
// An interrupt's TerminateExecution can leave a stream stuck mid-write, so
// once this REPL has been interrupted, a stream that writes nothing for a
// second gets the marker on its descriptor instead. Never before: the
// marker would pass the queued output, which would then arrive after the
// cell's end (seen under load: a 5 MiB write ended 132 KiB short).
function writeMarker(stream, marker) {
  if (stream.writableLength === 0) {
    fdWriter(stream.fd).write(marker);
    return Promise.resolve();
  }
  return new Promise((resolve) => {
    let left = stream.writableLength;
    let timer = null;
    const check = () => {
      if (!interrupted || stream.writableLength < left) {
        left = stream.writableLength;
        timer = setTimeout(check, 1000);
        return;
      }
      fdWriter(stream.fd).write(marker);
      resolve();
    };
    timer = setTimeout(check, 1000);
    stream.write(marker, () => { clearTimeout(timer); resolve(); });
  });
}

function send(obj) {
  fs.writeSync(4, JSON.stringify(obj) + '\n');
}

async function run(cmd) {
  const reply = { type: 'done', status: 'ok' };
  try {
    const { value } = await evaluate(cmd.code);
    if (value !== undefined && !cmd.silent) reply.result = util.inspect(value);
  } catch (err) {
    reply.status = 'error';
    reply.error = errorFields(err);
    if (err && err.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') interrupted = true;
  }
  const marker = '\0aiod:end:' + cmd.token + '\0';
  await writeMarker(process.stdout, marker);
  await writeMarker(process.stderr, marker);
  send(reply);
}

function main() {
  const input = new net.Socket({ fd: 3, readable: true, writable: false });
  const lines = readline.createInterface({ input, crlfDelay: Infinity });
  let chain = Promise.resolve();
  lines.on('line', (line) => {
    if (!line) return;
    const cmd = JSON.parse(line);
    if (cmd.type === 'complete' || cmd.type === 'inspect') {
      ask(cmd);
      return;
    }
    chain = chain.then(() => run(cmd));
  });
  lines.on('close', () => chain.then(() => process.exit(0)));
  send({ type: 'ready', version: process.versions.node });
}

main();
