// aiod's restore of a JavaScript session: run by aiod in a fresh Node.js
// REPL of the session as its own silent cell, inside a function given
// `args` ({"payload": base64 of a snapshot's state, verified by aiod}, or
// {"path": a file aiod wrote the verified state to, removed once read}).
// It writes one line to stdout, "\x1eaiod-snapshot " + JSON:
// {"restored": [names], "skipped": {name: why}} or {"error": why}.
const emit = (d) => process.stdout.write('\n\x1eaiod-snapshot ' + JSON.stringify(d) + '\n');
try {
  const v8 = require('v8');
  let raw;
  if (args.path) {
    const fs = require('fs');
    raw = fs.readFileSync(args.path);
    try { fs.unlinkSync(args.path); } catch (e) { /* aiod removes it too */ }
  } else {
    raw = Buffer.from(args.payload, 'base64');
  }
  const state = JSON.parse(raw.toString());
  raw = null;
  const restored = [], skipped = {};
  if (state.cwd) {
    try {
      process.chdir(state.cwd);
    } catch (e) {
      skipped['(working folder)'] = state.cwd + ' could not be entered again (' + e.message + ')';
    }
  }
  for (const [k, v] of Object.entries(state.env || {})) {
    if (process.env[k] !== v) process.env[k] = v;
  }
  for (const [name, b64] of Object.entries(state.values || {})) {
    try {
      globalThis[name] = v8.deserialize(Buffer.from(b64, 'base64'));
      restored.push(name);
    } catch (e) {
      skipped[name] = 'could not be deserialized (' + e.message + ')';
    }
  }
  for (const [name, src] of Object.entries(state.functions || {})) {
    try {
      globalThis[name] = (0, eval)('(' + src + '\n)');
      restored.push(name);
    } catch (e) {
      skipped[name] = 'could not be re-created from its source (' + e.message + ')';
    }
  }
  emit({ restored: restored.sort(), skipped });
} catch (e) {
  emit({ error: String(e && e.stack || e) });
}
