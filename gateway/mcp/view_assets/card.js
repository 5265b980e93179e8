let console_link = null;
document.getElementById("console").addEventListener("click", (event) => {
  event.preventDefault();
  if (console_link) bridge.openLink(console_link);
});

const render = (card) => {
  show("summary", card.summary);
  show("state", card.status);
  show("decision", card.decision);
  show("outcome", card.outcome);
  show("said", card.said || "");
  show("approvals", `${card.approvals_received} of ${card.approvals_required}`);
  const preview = document.getElementById("preview");
  preview.textContent = "";
  for (const line of card.preview || []) {
    const item = document.createElement("li");
    item.textContent = line;
    preview.append(item);
  }
  document.getElementById("preview-box").hidden = !(card.preview || []).length;
  console_link = card.console;
  document.getElementById("console").hidden = !console_link;
};

const follow = async (cardId) => {
  for (;;) {
    const answer = await bridge.callTool("countersign_view_card", { card_id: cardId });
    let wait = 2000;
    if (answer.isError) {
      const error = answer.structuredContent.error || {};
      show("status", refusal(answer));
      if (!error.retryable) return;
      wait = Math.max(wait, 1000 * ((error.details || {}).retry_after || error.retry_after || 2));
    } else {
      const card = answer.structuredContent;
      render(card);
      if (card.final) {
        show("status", "Settled: nothing more will change.");
        return;
      }
      show("status", "Following the card: it updates by itself.");
      wait = card.poll_ms || wait;
    }
    await new Promise((done) => setTimeout(done, wait));
  }
};

bridge.start("countersign-card-view", (result) => {
  const cardId = viewMeta(result).card_id || (result.structuredContent || {}).card_id;
  if (!cardId) {
    show("status", result.isError ? refusal(result) : "No card was filed.");
    return;
  }
  follow(cardId);
});
