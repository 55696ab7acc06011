// Drives aiod's /mcp with the official MCP TypeScript SDK (the version in
// package-lock.json): initialize, tools/list, execute_code (Python with a
// chart, with progress; JavaScript in a session twice; an error) and the
// file tools. Prints one JSON object with what it saw; the Go test
// (TestMCPTypeScriptSDK) judges it.
//   node mcp_client.mjs http://127.0.0.1:PORT/mcp TOKEN DIR
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, token, dir] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: 'aiod-ts-test', version: '1.0.0' });
const out = {};
try {
  await client.connect(transport);
  out.server = client.getServerVersion();
  out.protocol = transport.protocolVersion ?? null;
  out.tools = (await client.listTools()).tools.map((t) => ({ name: t.name, required: t.inputSchema.required ?? [] }));

  const progress = [];
  const chart = await client.callTool({
    name: 'execute_code',
    arguments: {
      language: 'python',
      code: "print('drawing', flush=True)\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()",
    },
  }, undefined, { onprogress: (p) => progress.push(p.message ?? '') , timeout: 120000 });
  out.chart = {
    isError: chart.isError ?? false,
    types: chart.content.map((c) => c.type),
    mime: chart.content.filter((c) => c.type === 'image').map((c) => c.mimeType),
    pngMagic: chart.content.filter((c) => c.type === 'image').map((c) => Buffer.from(c.data, 'base64').subarray(0, 4).toString('hex')),
    text: chart.content.filter((c) => c.type === 'text').map((c) => c.text),
    structuredStatus: chart.structuredContent?.data?.status ?? null,
    progress,
  };

  const first = await client.callTool({ name: 'execute_code', arguments: { language: 'javascript', code: 'globalThis.n = 41', session_id: 'ts-sess' } });
  const js = await client.callTool({ name: 'execute_code', arguments: { language: 'javascript', code: 'console.log(n + 1)', session_id: 'ts-sess' } });
  out.js = {
    text: js.content.map((c) => c.text), session: js.structuredContent?.data?.session_id ?? null,
    // What the two calls said of themselves, for a failure to show.
    first: { isError: first.isError ?? false, message: first.structuredContent?.message ?? null, data: first.structuredContent?.data ?? null },
    message: js.structuredContent?.message ?? null, fresh: js.structuredContent?.data?.fresh_runtime ?? null,
  };

  const err = await client.callTool({ name: 'execute_code', arguments: { language: 'python', code: '1/0' } });
  out.error = { isError: err.isError ?? false, text: err.content.map((c) => c.text).join('\n') };

  const bad = await client.callTool({ name: 'execute_code', arguments: { language: 'ruby', code: 'x' } });
  out.bad = { isError: bad.isError ?? false, text: bad.content.map((c) => c.text).join('\n') };

  await client.callTool({ name: 'write_file', arguments: { path: `${dir}/hello.txt`, content: 'hi from ts' } });
  const rd = await client.callTool({ name: 'read_file', arguments: { path: `${dir}/hello.txt` } });
  const ls = await client.callTool({ name: 'list_files', arguments: { path: dir } });
  out.files = { read: rd.content[0].text, list: ls.structuredContent?.files?.map((f) => f.name) ?? [] };

  const sessions = await client.callTool({ name: 'list_sessions', arguments: {} });
  out.sessions = sessions.structuredContent?.sessions?.map((s) => s.session_id) ?? [];
  const del = await client.callTool({ name: 'delete_session', arguments: { session_id: 'ts-sess' } });
  out.deleted = !(del.isError ?? false);

  await transport.terminateSession();
  await client.close();
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
}
console.log(JSON.stringify(out));
