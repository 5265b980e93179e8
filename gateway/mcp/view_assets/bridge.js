"use strict";
// The view's half of MCP Apps (io.modelcontextprotocol/ui): JSON-RPC over postMessage with the host
// that framed it. Only the host is spoken to; the view reaches no network (its CSP forbids it).
const bridge = (() => {
  const pending = new Map();
  let nextId = 1;
  let onResult = () => {};
  const send = (message) => window.parent.postMessage({ jsonrpc: "2.0", ...message }, "*");
  const request = (method, params) =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve, reject });
      send({ id, method, params });
    });
  window.addEventListener("message", (event) => {
    if (event.source !== window.parent) return;
    const message = event.data;
    if (!message || message.jsonrpc !== "2.0") return;
    if (message.method === undefined && pending.has(message.id)) {
      const { resolve, reject } = pending.get(message.id);
      pending.delete(message.id);
      if (message.error) reject(new Error(String(message.error.message || "host error")));
      else resolve(message.result);
    } else if (message.method === "ui/notifications/tool-result") {
      onResult(message.params || {});
    } else if (message.method !== undefined && message.id !== undefined) {
      send({ id: message.id, result: {} }); // ping, ui/resource-teardown: nothing to keep or undo
    }
  });
  const resized = () =>
    send({
      method: "ui/notifications/size-changed",
      params: { width: document.documentElement.scrollWidth, height: document.documentElement.scrollHeight },
    });
  return {
    async start(name, handler) {
      onResult = handler;
      await request("ui/initialize", {
        appInfo: { name, version: "1" },
        appCapabilities: {},
        protocolVersion: "2026-01-26",
      });
      send({ method: "ui/notifications/initialized", params: {} });
      new ResizeObserver(resized).observe(document.body);
    },
    callTool: (name, args) => request("tools/call", { name, arguments: args }),
    openLink: (url) => request("ui/open-link", { url }),
  };
})();

// Text from the gateway is always set as text, never parsed as markup.
const show = (id, text) => {
  document.getElementById(id).textContent = text;
};
const viewMeta = (result) => ((result && result._meta) || {})["io.countersign/view"] || {};
const refusal = (result) => {
  const error = (result.structuredContent || {}).error || {};
  return `${error.message || "The gateway refused."} (${error.code || "UNKNOWN"})`;
};
