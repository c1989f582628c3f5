// Runs MCP Inspector's own CLI code (its exported runCli, the function its binary calls)
// once per call, in one Node process: the same argument parsing, client, output-schema
// checks and exit-code mapping as `mcp-inspector --cli URL --method tools/call ...`,
// without a Node start (about 1.5 s on a small machine) per call.
// Usage: node inspector_batch.mjs PLAN.json
//   PLAN: {"url": "http://127.0.0.1:PORT/mcp", "calls": [{"tool": "...", "arguments": {...}}]}
// Prints one JSON array: per call {"code": exit status, "output": what it printed on stdout}.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";

const require = createRequire(import.meta.url);
const root = dirname(require.resolve("@modelcontextprotocol/inspector/package.json"));
const { runCli } = await import(pathToFileURL(join(root, "clients", "cli", "build", "index.js")).href);

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const realWrite = process.stdout.write.bind(process.stdout);
const results = [];
for (const call of plan.calls) {
  let captured = "";
  // the CLI prints its result with process.stdout.write(text, callback)
  process.stdout.write = (chunk, encoding, callback) => {
    captured += typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8");
    const done = typeof encoding === "function" ? encoding : callback;
    if (done) done();
    return true;
  };
  let code = 0;
  try {
    await runCli(["node", "mcp-inspector", plan.url, "--method", "tools/call",
      "--tool-name", call.tool, "--tool-args-json", JSON.stringify(call.arguments)]);
  } catch (err) {
    // the binary's handleError exits with err.exitCode (CliExitCodeError), else 1
    code = typeof err?.exitCode === "number" ? err.exitCode : 1;
  } finally {
    process.stdout.write = realWrite;
  }
  results.push({ code, output: captured });
}
realWrite(JSON.stringify(results) + "\n", () => process.exit(0));
