bridge.start("countersign-read-view", async (result) => {
  const { handle } = viewMeta(result);
  if (!handle) {
    show("status", "This result has nothing withheld from the agent to show.");
    return;
  }
  show("status", "Opening what the agent was not shown…");
  const opened = await bridge.callTool("countersign_view_read", { handle });
  if (opened.isError) {
    show("status", refusal(opened));
    return;
  }
  const { tool, text, untrusted } = opened.structuredContent;
  show("tool", tool);
  show("text", text);
  document.getElementById("stranger").hidden = !untrusted;
  show("status", "Shown once: this view cannot open it again.");
});
