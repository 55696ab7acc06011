// Drives /v1/shell the way the agent_sandbox TypeScript SDK's shell client
// does (its fetcher: the base URL joined with "v1/shell/...", the Fern
// headers, a JSON body of the request object as given, GETs and DELETEs
// without a body), and prints every exchange as JSON for the Go test to
// judge. Usage: node ts_shell_client.mjs BASE_URL
const base = process.argv[2];
const log = [];

async function call(method, rel, body) {
  const headers = {
    "X-Fern-Language": "JavaScript",
    "X-Fern-Runtime": "node",
    "X-Fern-Runtime-Version": process.versions.node,
  };
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const url = new URL(rel, base.endsWith("/") ? base : base + "/");
  const resp = await fetch(url, init);
  const text = await resp.text();
  const entry = { method, path: url.pathname, status: resp.status, body: text };
  log.push(entry);
  return { status: resp.status, json: JSON.parse(text) };
}

function check(cond, what) {
  if (!cond) throw new Error(what + ": " + JSON.stringify(log[log.length - 1]));
}

const shell = {
  createSession: (r = {}) => call("POST", "v1/shell/sessions/create", r),
  execCommand: (r) => call("POST", "v1/shell/exec", r),
  view: (r) => call("POST", "v1/shell/view", r),
  waitForProcess: (r) => call("POST", "v1/shell/wait", r),
  writeToProcess: (r) => call("POST", "v1/shell/write", r),
  killProcess: (r) => call("POST", "v1/shell/kill", r),
  listSessions: () => call("GET", "v1/shell/sessions"),
  getSessionStats: () => call("GET", "v1/shell/sessions/stats"),
  getTerminalUrl: () => call("GET", "v1/shell/terminal-url"),
  cleanupSession: (id) => call("DELETE", "v1/shell/sessions/" + encodeURIComponent(id)),
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

try {
  let r = await shell.createSession();
  check(r.status === 200 && r.json.data.session_id, "createSession");
  const id = r.json.data.session_id;
  r = await shell.execCommand({ id, command: "export TS_FLAG=yes; cd /" });
  check(r.json.data.status === "completed" && r.json.data.exit_code === 0, "exec");
  r = await shell.execCommand({ id, command: "echo $TS_FLAG $PWD; ls /no-such-ts 2>/dev/null; echo code=$?" });
  check(r.json.data.output === "yes /\ncode=2\n", "state kept");
  r = await shell.execCommand({ id, command: "read -r line; echo got:$line", async_mode: true });
  check(r.json.data.status === "running", "async");
  await sleep(200);
  r = await shell.writeToProcess({ id, input: "typed", press_enter: true });
  check(r.status === 200, "write");
  r = await shell.waitForProcess({ id, seconds: 10 });
  check(r.json.data.status === "completed", "wait");
  r = await shell.view({ id });
  check(r.json.data.output === "got:typed\n", "view");
  await shell.execCommand({ id, command: "sleep 100", async_mode: true });
  await sleep(200);
  const t0 = Date.now();
  r = await shell.killProcess({ id });
  check(r.json.data.status === "terminated" && Date.now() - t0 < 3000, "kill");
  r = await shell.listSessions();
  check(r.json.data.sessions[id] !== undefined, "listSessions");
  r = await shell.getSessionStats();
  check(r.json.data.total_sessions === 1, "stats");
  r = await shell.getTerminalUrl();
  check(typeof r.json.data === "string" && r.json.data.startsWith("http"), "terminal url");
  r = await shell.cleanupSession(id);
  check(r.status === 200, "cleanup");
  console.log(JSON.stringify({ ok: true, log }));
} catch (e) {
  console.log(JSON.stringify({ ok: false, error: String(e), log }));
}
