// Drives gitstate's MCP server with the TypeScript SDK 1.x client, which validates every
// result that carries structuredContent against the tool's outputSchema (error results
// too). Usage: node mcp_client.mjs PLAN.json; prints one JSON document on stdout.
//
// PLAN: {"command": "...", "args": [...], "env": {...}}   (stdio)
//    or {"url": "http://127.0.0.1:PORT/mcp", "headers": {...}}   (Streamable HTTP)
//   and "calls": [{"tool": "...", "arguments": {...}}, ...]
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const transport = plan.url
  ? new StreamableHTTPClientTransport(new URL(plan.url), { requestInit: { headers: plan.headers || {} } })
  : new StdioClientTransport({ command: plan.command, args: plan.args, env: plan.env, stderr: "pipe" });
const client = new Client({ name: "gitstate-tests", version: "1.0.0" });
await client.connect(transport);
const out = { server: client.getServerVersion(), tools: [], results: [] };
// listing the tools is what makes the client validate results against their schemas
const listed = await client.listTools();
out.tools = listed.tools.map((t) => ({ name: t.name, outputSchema: t.outputSchema ?? null }));
for (const call of plan.calls || []) {
  const entry = { tool: call.tool, threw: false };
  try {
    const result = await client.callTool({ name: call.tool, arguments: call.arguments || {} });
    entry.isError = result.isError === true;
    entry.structuredContent = result.structuredContent ?? null;
    entry.text = (result.content || []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
  } catch (err) {
    entry.threw = true;
    entry.error = String(err && err.message ? err.message : err);
  }
  out.results.push(entry);
}
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
