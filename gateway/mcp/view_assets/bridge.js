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
  const resized = () => {
    const { width, height } = document.body.getBoundingClientRect();
    send({ method: "ui/notifications/size-changed", params: { width: Math.ceil(width), height: Math.ceil(height) } });
  };
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

// Text from the gateway is always set as text, never parsed as markup. A character that would not be
// seen (a control, a bidi override, a zero-width space) is shown as its code point, as the console does.
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Co}\p{Zl}\p{Zp}\u034f\u115f\u1160\u3164\uffa0\ufe00-\ufe0f]/u;
const show = (id, text) => {
  const target = document.getElementById(id);
  target.textContent = "";
  for (const char of String(text)) {
    if (char === "\n" || char === "\t" || !INVISIBLE.test(char)) {
      target.append(char);
      continue;
    }
    const mark = document.createElement("span");
    mark.className = "hidden-char";
    mark.textContent = `U+${char.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}`;
    target.append(mark);
  }
};
const viewMeta = (result) => ((result && result._meta) || {})["io.countersign/view"] || {};
const refusal = (result) => {
  const error = (result.structuredContent || {}).error || {};
  return `${error.message || "The gateway refused."} (${error.code || "UNKNOWN"})`;
};
