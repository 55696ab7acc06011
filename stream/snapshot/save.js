// aiod's snapshot of a JavaScript session: run by aiod in the session's
// Node.js REPL as its own silent cell, inside a function given `args`
// ({"max_bytes", "out"}). It writes one line to stdout, "\x1eaiod-snapshot " +
// JSON: {"payload": base64 of the state (JSON), "saved": [names],
// "skipped": {name: why}, "reopened": {name: how}} or {"error": why}. With
// "out" (a new file's path in a folder aiod reads too), the state goes
// there instead of "payload", and "bytes" says its size.
// The state: the globals' plain data (v8.serialize), functions and classes
// by source, the working folder and the environment.
const emit = (d) => process.stdout.write('\n\x1eaiod-snapshot ' + JSON.stringify(d) + '\n');
try {
  const v8 = require('v8');
  const vm = require('vm');
  const base = new Set(vm.runInContext('Object.getOwnPropertyNames(globalThis)', vm.createContext({})));
  for (const n of Object.getOwnPropertyNames(vm.runInThisContext('globalThis'))) base.add(n);
  for (const n of ['console', 'require', 'module', 'exports']) base.add(n);
  const plain = new Set([Object.prototype, Array.prototype, Map.prototype, Set.prototype, Date.prototype,
    RegExp.prototype, Boolean.prototype, Number.prototype, String.prototype, Error.prototype, null]);
  const values = {}, functions = {}, skipped = {}, reopened = {}, sizes = {};
  skipped['(let, const, class)'] = 'top-level let, const and class declarations are not visible to a snapshot; declare with var (or function), or assign to globalThis, to keep a value';
  for (const name of Object.getOwnPropertyNames(globalThis)) {
    if (base.has(name)) continue;
    const desc = Object.getOwnPropertyDescriptor(globalThis, name);
    if (!desc || !('value' in desc)) {
      skipped[name] = 'an accessor (getter or setter)';
      continue;
    }
    const v = desc.value;
    if (typeof v === 'function') {
      const src = Function.prototype.toString.call(v);
      if (/\[native code\]\s*\}$/.test(src)) {
        skipped[name] = 'a native or bound function';
        continue;
      }
      functions[name] = src;
      sizes[name] = src.length;
      reopened[name] = 're-created from its source; variables it captured from other scopes are not kept';
      continue;
    }
    if (v && typeof v === 'object' && !ArrayBuffer.isView(v) && !(v instanceof ArrayBuffer)) {
      const p = Object.getPrototypeOf(v);
      if (!plain.has(p)) {
        const cls = (p && p.constructor && p.constructor.name) || 'an object';
        if (typeof v.then === 'function') skipped[name] = 'a promise: a pending result cannot be saved';
        else skipped[name] = 'an instance of ' + cls + ': only plain data (objects, arrays, Map, Set, Date, typed arrays) is saved';
        continue;
      }
    }
    let b;
    try {
      b = v8.serialize(v);
    } catch (e) {
      skipped[name] = 'cannot be serialized (' + (e && e.message) + ')';
      continue;
    }
    if (b.length > args.max_bytes) {
      skipped[name] = 'over the size limit (' + b.length + ' bytes; a snapshot may hold ' + args.max_bytes + ')';
      continue;
    }
    values[name] = b.toString('base64');
    sizes[name] = values[name].length;
  }
  let payload;
  for (;;) {
    payload = Buffer.from(JSON.stringify({ values, functions, cwd: process.cwd(), env: process.env }));
    const names = Object.keys(values);
    if (payload.length <= args.max_bytes || names.length === 0) break;
    const big = names.reduce((a, b) => (sizes[a] >= sizes[b] ? a : b));
    skipped[big] = 'over the size limit (with it the snapshot passed ' + args.max_bytes + ' bytes)';
    delete values[big];
  }
  if (payload.length > args.max_bytes) {
    emit({ error: 'the snapshot would be ' + payload.length + ' bytes, over its limit ' + args.max_bytes });
  } else {
    const d = { saved: Object.keys(values).concat(Object.keys(functions)).sort(), skipped, reopened };
    if (args.out) {
      require('fs').writeFileSync(args.out, payload, { flag: 'wx', mode: 0o600 });
      d.bytes = payload.length;
    } else {
      d.payload = payload.toString('base64');
    }
    emit(d);
  }
} catch (e) {
  emit({ error: String(e && e.stack || e) });
}
