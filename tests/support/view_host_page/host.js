// A test host for MCP Apps views, built on the official packages: the TypeScript MCP client speaks to the
// gateway (same origin, the agent's key from the page's fragment), and ext-apps' AppBridge frames each view
// in a sandboxed iframe exactly as a chat host does. The test reads `window.host` and the views' own DOM.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  AppBridge,
  PostMessageTransport,
  getToolUiResourceUri,
  isToolVisibilityAppOnly,
} from "@modelcontextprotocol/ext-apps/app-bridge";

const HOST = { name: "countersign-test-host", version: "1" };
const VIEWS = { "io.modelcontextprotocol/ui": { mimeTypes: ["text/html;profile=mcp-app"] } };

const host = { ready: false, views: [], links: [], errors: [] };
window.host = host;
window.addEventListener("unhandledrejection", (event) => host.errors.push(String(event.reason)));

const key = new URLSearchParams(location.hash.slice(1)).get("key");
const client = new Client(HOST, { capabilities: { extensions: VIEWS } });

// Show `result` of the call of `tool` in the tool's view; resolves once the view is initialized and given it.
async function frame(tool, args, result) {
  const uri = getToolUiResourceUri(tool);
  const [content] = (await client.readResource({ uri })).contents;
  const box = document.createElement("section");
  const title = document.createElement("h2");
  title.textContent = `${tool.name} → ${uri}`;
  box.append(title);
  const iframe = document.createElement("iframe");
  iframe.setAttribute("sandbox", "allow-scripts");
  iframe.name = `view-${host.views.length}`;
  box.append(iframe);
  document.getElementById("views").append(box);
  const bridge = new AppBridge(client, HOST, { openLinks: {}, serverTools: {}, logging: {} });
  bridge.onsizechange = ({ height }) => {
    if (height) iframe.style.height = `${Math.min(height + 4, 640)}px`;
  };
  bridge.onopenlink = async ({ url }) => {
    host.links.push(url);
    return {};
  };
  const initialized = new Promise((done) => {
    bridge.oninitialized = done;
  });
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  iframe.srcdoc = content.text; // after connect: the view's ui/initialize finds the bridge listening
  await initialized;
  await bridge.sendToolInput({ arguments: args });
  await bridge.sendToolResult(result);
  host.views.push({ frame: iframe.name, uri, meta: content._meta });
}

// What a model would be handed: the listing without the tools only views may call, and each result
// without its _meta.
host.call = async (name, args) => {
  const listed = (await client.listTools()).tools;
  const tool = listed.find((candidate) => candidate.name === name);
  const result = await client.callTool({ name, arguments: args });
  const { _meta, ...forModel } = result;
  host.appOnly = listed.filter(isToolVisibilityAppOnly).map((candidate) => candidate.name);
  const forModelTools = listed.filter((candidate) => !isToolVisibilityAppOnly(candidate));
  host.modelSaw = JSON.stringify({ tools: forModelTools, result: forModel });
  host.structured = result.structuredContent;
  await frame(tool, args, result);
  return host.views.length - 1;
};

client
  .connect(new StreamableHTTPClientTransport(new URL("/mcp", location.origin), {
    requestInit: { headers: { authorization: `Bearer ${key}` } },
  }))
  .then(() => {
    history.replaceState(null, "", location.pathname); // the key leaves the address bar
    host.ready = true;
  })
  .catch((error) => host.errors.push(String(error)));
