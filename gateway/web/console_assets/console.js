// Countersign admin console. Vanilla JS, no build step, no third-party code.
//
// Everything shown comes from the admin API and is treated as hostile: the agent's own words,
// arguments, adapter descriptions and diffs. Data only ever becomes text nodes (see `el` and
// `append`); this file never parses a string as HTML. An approver signed in through the company's
// identity provider is known by an HttpOnly session cookie this script never sees; every change it
// sends carries the session's CSRF token. In demo mode an admin key may be pasted instead: it lives
// in sessionStorage and leaves the tab only as the Authorization header of requests to this API.
"use strict";

(() => {
  const KEY_STORAGE = "countersign.adminKey";
  const API = "api/"; // relative to /admin/, so a gateway behind a path prefix works too
  const LIST_LIMIT = 200; // cards added to the list per "Show more"
  const PAGE_LIMIT = 500; // the API's largest page
  const SEARCH_PAGES = 20; // pages followed per "Show more" before asking to search further
  const POLL_SECONDS = 5; // without the event stream, the view is read again this often
  const MAX_EVENT_BYTES = 1 << 20; // an event stream that sends more without a break is dropped
  const STATES = [
    "PENDING", "NEEDS_RECONCILIATION", "APPROVED", "EXECUTING", "UNKNOWN",
    "SUCCEEDED", "FAILED", "REJECTED", "CANCELLED", "EXPIRED",
  ];
  const KEY_SHAPE = /^[\x21-\x7e]{8,512}$/;
  const ATTRIBUTES = new Set([
    "id", "href", "type", "for", "name", "value", "placeholder", "rows", "title", "role",
    "required", "disabled", "open", "colspan", "autocomplete", "spellcheck", "maxlength", "selected", "scope",
  ]);

  // Characters a reader does not see: controls (but newline and tab), format characters (bidi
  // overrides, zero-width, tag characters), private use, line/paragraph separators, variation
  // selectors and invisible fillers. Shown as visible marks, so the admin reads what the text holds.
  const HIDDEN = /[\p{Cc}\p{Cf}\p{Co}\p{Zl}\p{Zp}\u034f\u115f\u1160\u3164\uffa0\ufe00-\ufe0f\u{e0100}-\u{e01ef}]/gu;

  class SignedOut extends Error {}

  let adminKey = null;
  let session = null; // {csrf, subject} of the provider sign-in's session, read from GET ../session
  const signedIn = () => Boolean(adminKey || session);
  const NEXT_STORAGE = "countersign.next"; // where to go back to after the provider's sign-in
  let renderToken = 0; // a view renders only if no newer navigation happened while it waited
  // What the view shows, for live updates: {kind: "list", state, rows, token} or {kind: "card", card, token}.
  let current = null;
  let busy = false; // a decision of this admin is in flight: its answer renders the card, not an event

  const $ = (id) => document.getElementById(id);

  // An event handler that may call the API: signing out midway is not an error, anything else is shown.
  const guarded = (handler) => async (event) => {
    try {
      await handler(event);
    } catch (error) {
      if (!(error instanceof SignedOut)) showNotice("error", "The console failed: " + String(error && error.message));
    }
  };

  // -- DOM building: data always becomes text ------------------------------------------------------

  function reveal(text) {
    const fragment = document.createDocumentFragment();
    let last = 0;
    for (const match of text.matchAll(HIDDEN)) {
      const char = match[0];
      if (char === "\n" || char === "\t") continue;
      if (match.index > last) fragment.append(document.createTextNode(text.slice(last, match.index)));
      const code = char.codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
      const mark = document.createElement("span");
      mark.className = "hidden-char";
      mark.title = "invisible character";
      mark.textContent = "U+" + code;
      fragment.append(mark);
      last = match.index + char.length;
    }
    if (last < text.length) fragment.append(document.createTextNode(text.slice(last)));
    return fragment;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : reveal(String(child)));
    }
    return node;
  }

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else if (name.startsWith("data-") || name.startsWith("aria-") || ATTRIBUTES.has(name)) {
        if (name === "href" && !String(value).startsWith("#")) throw new Error("only in-page links");
        node.setAttribute(name, value === true ? "" : String(value));
      } else throw new Error("attribute not allowed: " + name);
    }
    return append(node, children);
  }

  const json = (value) => JSON.stringify(value, null, 2);
  const mono = (text) => el("code", null, text);

  function when(iso) {
    if (!iso) return "—";
    const at = new Date(iso);
    if (Number.isNaN(at.getTime())) return String(iso);
    const minutes = Math.round((at.getTime() - Date.now()) / 60000);
    const span = Math.abs(minutes);
    const amount = span < 60 ? `${span} min` : span < 2880 ? `${Math.floor(span / 60)} h ${span % 60} min`
      : `${Math.floor(span / 1440)} days`;
    const relative = minutes === 0 ? "now" : minutes > 0 ? "in " + amount : amount + " ago";
    return `${local(at)} (${relative})`;
  }

  // The approver's own clock and zone, named: "1 Dec 2026, 13:05:00 CET". The API's times are ISO 8601
  // with an offset, so the browser converts them exactly.
  function local(at) {
    // (dateStyle/timeStyle cannot be combined with timeZoneName: the fields are named one by one.)
    return at.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit",
      minute: "2-digit", second: "2-digit", timeZoneName: "short" });
  }

  function at(iso) {
    if (!iso) return "—";
    const moment = new Date(iso);
    return Number.isNaN(moment.getTime()) ? String(iso) : local(moment);
  }

  function fields(pairs) {
    return el("dl", { class: "fields" },
      pairs.filter(Boolean).map(([label, value]) => [el("dt", null, label), el("dd", null, value)]));
  }

  // -- notices --------------------------------------------------------------------------------------

  function notice(kind, text, problems) {
    return el("div", { class: "notice " + kind, role: kind === "ok" ? "status" : "alert" },
      el("p", null, text),
      problems && problems.length ? el("ul", null, problems.map((p) => el("li", null, String(p)))) : null);
  }

  function showNotice(kind, text, problems) {
    const box = $("notice");
    box.replaceChildren(notice(kind, text, problems));
    box.hidden = false;
  }

  function clearNotice() {
    $("notice").replaceChildren();
    $("notice").hidden = true;
  }

  function errorText(res, what) {
    if (res.network) return "The gateway did not answer (network error); nothing is known to have changed.";
    const error = res.body && typeof res.body.error === "object" && res.body.error ? res.body.error : {};
    const message = typeof error.message === "string" ? error.message : "";
    switch (res.status) {
      case 403:
        return "Not allowed: " + (message || "your key lacks the role for this") + ".";
      case 404:
        return `Not found: ${message || "no such " + what} (one of another org answers the same way).`;
      case 409:
        return "Conflict: " + message + ".";
      case 422:
        return "Refused as invalid: " + message;
      case 503:
        return "The ledger is unavailable: " + message;
      default:
        return `Unexpected answer ${res.status}` + (message ? ": " + message : ".");
    }
  }

  const problemsOf = (res) => (res.body && res.body.error && Array.isArray(res.body.error.problems)
    ? res.body.error.problems : null);

  // -- the API --------------------------------------------------------------------------------------

  // A session's requests carry its cookie (same origin only) and, to change anything, its CSRF token;
  // a pasted key's carry the key and no cookie.
  function credentialsFor(headers) {
    if (session) {
      headers["X-CSRF-Token"] = session.csrf;
      return "same-origin";
    }
    headers.Authorization = "Bearer " + adminKey;
    return "omit";
  }

  const ENDED = "Your sign-in ended (expired, revoked, or the key was refused). Sign in again.";

  async function api(method, path, body) {
    if (!signedIn()) throw new SignedOut();
    const headers = { Accept: "application/json" };
    const init = {
      method,
      headers,
      cache: "no-store",
      credentials: credentialsFor(headers),
      redirect: "error",
      referrerPolicy: "no-referrer",
    };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(API + path, init);
    } catch {
      return { status: 0, network: true, body: null };
    }
    let data = null;
    try {
      data = await response.json();
    } catch {
      data = null;
    }
    if (response.status === 401) {
      signOut(ENDED, { ended: true });
      throw new SignedOut();
    }
    return { status: response.status, body: data };
  }

  // -- session --------------------------------------------------------------------------------------

  function useKey(key) {
    adminKey = key;
    sessionStorage.setItem(KEY_STORAGE, key);
  }

  function signOut(message, options) {
    if (session && !(options && options.ended)) endSession(session);
    session = null;
    adminKey = null;
    stopLive();
    sessionStorage.removeItem(KEY_STORAGE);
    renderToken += 1;
    $("view").replaceChildren();
    history.replaceState(null, "", location.pathname + location.search);
    showSignIn();
    if (message) showNotice("error", message);
  }

  // Ends the provider sign-in's session at the gateway, then, where the provider can, at the provider too.
  async function endSession(ending) {
    let answer = null;
    try {
      const response = await fetch("signout", { method: "POST", headers: { "X-CSRF-Token": ending.csrf },
        cache: "no-store", credentials: "same-origin", redirect: "error", referrerPolicy: "no-referrer" });
      answer = await response.json();
    } catch {
      answer = null;
    }
    const provider = answer && typeof answer.provider_logout === "string" ? answer.provider_logout : "";
    if (/^https?:\/\//.test(provider)) location.assign(provider);
  }

  async function readSession() {
    try {
      const response = await fetch("session", { cache: "no-store", credentials: "same-origin", redirect: "error" });
      return response.ok ? await response.json() : null;
    } catch {
      return null;
    }
  }

  // A link may carry a key once, as #key=...&next=/cards/<id>: it is taken out of the address bar
  // and this history entry before anything renders, and ignored if the tab is already signed in.
  function takeKeyFromFragment() {
    if (!location.hash.startsWith("#key=")) return null;
    const params = new URLSearchParams(location.hash.slice(1));
    const key = (params.get("key") || "").trim();
    const next = params.get("next") || "";
    const target = /^\/(cards|adapters|upstreams|overview)([/?][\w\-.:=&%/]*)?$/.test(next) ? "#" + next : "#/cards";
    history.replaceState(null, "", location.pathname + location.search + target);
    if (adminKey) return "A key in the link was ignored: this tab is already signed in.";
    if (!KEY_SHAPE.test(key)) return "The key in the link does not look like a key.";
    useKey(key);
    return null;
  }

  function showSignIn() {
    $("sign-in").hidden = false;
    $("view").hidden = true;
    $("nav").hidden = true;
    $("session").hidden = true;
    if (!$("sign-in-form").hidden) $("key-input").focus();
  }

  function showSignedIn() {
    clearNotice();
    $("sign-in").hidden = true;
    $("view").hidden = false;
    $("nav").hidden = false;
    $("session").hidden = false;
    $("key-hint").textContent = session ? "signed in as " + session.subject : "signed in, key …" + adminKey.slice(-4);
    $("nav-passkeys").hidden = !session;
    startLive();
  }

  // -- routing --------------------------------------------------------------------------------------

  async function route() {
    if (!signedIn()) {
      showSignIn();
      return;
    }
    if ($("view").hidden) showSignedIn();
    const hash = location.hash;
    const card = /^#\/cards\/([^/?]+)$/.exec(hash);
    $("nav-cards").classList.toggle("current", hash.startsWith("#/cards"));
    $("nav-adapters").classList.toggle("current", hash === "#/adapters");
    $("nav-upstreams").classList.toggle("current", hash === "#/upstreams");
    $("nav-overview").classList.toggle("current", hash.startsWith("#/overview"));
    $("nav-passkeys").classList.toggle("current", hash === "#/passkeys");
    try {
      if (card) {
        let cardId = null;
        try {
          cardId = decodeURIComponent(card[1]);
        } catch {
          cardId = null;
        }
        if (cardId === null) location.replace("#/cards");
        else await cardView(cardId);
      } else if (hash === "#/adapters") {
        await adaptersView();
      } else if (hash === "#/upstreams") {
        await upstreamsView();
      } else if (hash === "#/passkeys") {
        await passkeysView();
      } else if (hash === "#/overview" || hash.startsWith("#/overview?")) {
        const window = new URLSearchParams(hash.slice("#/overview".length).replace(/^\?/, "")).get("window");
        await overviewView(OVERVIEW_WINDOWS.includes(window) ? window : "24h");
      } else if (hash === "#/cards" || hash.startsWith("#/cards?")) {
        const state = new URLSearchParams(hash.slice("#/cards".length).replace(/^\?/, "")).get("state");
        await listView(state === null ? "PENDING" : state);
      } else {
        location.replace("#/cards");
      }
    } catch (error) {
      if (!(error instanceof SignedOut)) {
        showNotice("error", "The console failed: " + String(error && error.message ? error.message : error));
      }
    }
  }

  function startView(...children) {
    renderToken += 1;
    current = null;
    const view = $("view");
    view.replaceChildren(...children.filter(Boolean));
    return renderToken;
  }

  // -- the card list --------------------------------------------------------------------------------

  async function listView(state) {
    clearNotice();
    const filter = el("select", {
      id: "state-filter",
      "aria-label": "state",
      onchange: (event) => {
        const value = event.target.value;
        location.hash = "#/cards?state=" + encodeURIComponent(value);
      },
    },
    [...STATES, ""].map((s) => el("option", { value: s, selected: s === state }, s || "all states")));
    const body = el("div", { class: "loading" }, "Loading…");
    const token = startView(
      el("div", { class: "toolbar" },
        el("h2", null, state ? `Cards: ${state}` : "Cards: all states"),
        el("label", null, "Show ", filter),
        el("button", { type: "button", onclick: () => route() }, "Reload")),
      body);
    const first = await fetchCards(state, null);
    if (token !== renderToken) return;
    if (first.error) {
      body.replaceWith(notice("error", errorText(first.error, "card"), problemsOf(first.error)));
      return;
    }
    const rows = el("tbody", null, first.cards.map(cardRow));
    const empty = first.cards.length === 0 && !first.next
      ? el("p", { class: "empty", id: "list-empty" }, "No cards of your org in this state.") : null;
    const table = el("table", { class: "cards", id: "card-list" },
      el("thead", null, el("tr", null,
        ["Summary", "Tool", "Requester", "Approvals", "State", "Expires"].map((h) => el("th", null, h)))),
      rows);
    const footer = el("div", { class: "list-more" });
    // The list follows the API's cursors, so no card is out of reach: "Show more" goes on from
    // where the last batch stopped, until the API says nothing is left.
    const showFooter = (next) => {
      const shown = rows.childElementCount;
      if (!next) {
        // (replaceChildren(null) would show the word "null": nothing at all is an empty list of children)
        footer.replaceChildren(...(shown > LIST_LIMIT ? [el("p", { class: "hint" }, `All ${shown} cards shown.`)] : []));
        return;
      }
      const more = el("button", {
        type: "button",
        id: "more-cards",
        onclick: guarded(async () => {
          more.disabled = true;
          const batch = await fetchCards(state, next);
          if (token !== renderToken) return;
          append(rows, batch.cards.map(cardRow));
          if (batch.error) {
            footer.replaceChildren(notice("error", errorText(batch.error, "card"), problemsOf(batch.error)));
            return;
          }
          showFooter(batch.next);
        }),
      }, "Show more");
      const text = shown ? `Showing the newest ${shown}; older cards may match.`
        : "No match among the newest cards searched.";
      footer.replaceChildren(el("p", { class: "hint" }, text, " ", more));
    };
    showFooter(first.next);
    body.replaceWith(el("div", null, table, empty, footer));
    current = { kind: "list", state, rows, token };
  }

  // Up to LIST_LIMIT more cards from `cursor` on (null: from the newest), following the API's
  // cursors; a page may be short or empty and still have a next one. Stops after SEARCH_PAGES
  // pages, so a rare filter over a long history asks before it searches further.
  async function fetchCards(state, cursor) {
    const cards = [];
    let next = cursor;
    for (let pages = 0; pages < SEARCH_PAGES; pages += 1) {
      const query = new URLSearchParams({ limit: String(Math.min(LIST_LIMIT - cards.length, PAGE_LIMIT)) });
      if (state) query.set("state", state);
      if (next) query.set("cursor", next);
      const res = await api("GET", "cards?" + query.toString());
      if (res.status !== 200 || !res.body) return { cards, next, error: res };
      cards.push(...(Array.isArray(res.body.cards) ? res.body.cards : []));
      next = typeof res.body.next_cursor === "string" ? res.body.next_cursor : null;
      if (!next || cards.length >= LIST_LIMIT) break;
    }
    return { cards, next, error: null };
  }

  function cardRow(card) {
    const approvals = card.approvals || {};
    // A final card has no running deadline (null): it shows none.
    const expiry = card.deadline;
    return el("tr", { "data-card-id": card.card_id, "data-version": String(card.version), "data-state": card.state },
      el("td", null,
        // A tainted card says so in the list already: an approver opens it knowing.
        card.tainted ? el("span", { class: "badge tainted-badge", title: "its requester was shown third-party text" },
          "tainted") : null,
        el("a", { href: "#/cards/" + encodeURIComponent(card.card_id) }, card.summary || card.card_id)),
      el("td", null, mono(card.tool)),
      el("td", null, card.acting_client ? `${card.requester} (via ${card.acting_client})` : card.requester),
      el("td", null, `${approvals.received ?? "?"} of ${approvals.required ?? "?"}`),
      el("td", null, el("span", { class: "state state-" + card.state }, card.state), " ",
        el("span", { class: "said" }, card.said || "")),
      el("td", null, expiry ? when(expiry) : "—"));
  }

  // -- one card -------------------------------------------------------------------------------------

  async function cardView(cardId) {
    clearNotice();
    const body = el("div", { class: "loading" }, "Loading…");
    const token = startView(backLink(), body);
    const res = await api("GET", "cards/" + encodeURIComponent(cardId));
    if (token !== renderToken) return;
    if (res.status !== 200) {
      body.replaceWith(notice("error", errorText(res, "card"), problemsOf(res)));
      return;
    }
    renderCard(res.body.card, null);
  }

  function backLink() {
    return el("p", { class: "back" }, el("a", { href: "#/cards" }, "← Cards"));
  }

  function renderCard(card, message) {
    const token = startView(backLink());
    $("view").append(cardDetail(card, message, token));
    current = { kind: "card", card, token };
  }

  // The card page, for a screen of 1280×900: what the write does (the preview) and what the agent wrote
  // (boxed as untrusted) on the left, the decision and its buttons beside them, both above the fold;
  // machine data (version, hashes, key, attempts, history) folded away below.
  function cardDetail(card, message, token) {
    const approvals = card.approvals || {};
    const requester = card.requester || {};
    const rejection = card.rejection;
    const evidence = card.evidence && typeof card.evidence === "object" ? card.evidence : {};
    return el("article", { id: "card-detail", "data-card-id": card.card_id, "data-state": card.state,
      "data-version": String(card.version) },
    // The card's provenance (what the requester did before proposing it) is rendered into this slot, first.
    provenanceSection(card),
    el("div", { class: "card-head" },
      el("h2", null, card.summary || card.card_id),
      el("span", { class: "state state-" + card.state }, card.state),
      el("button", { type: "button", class: "quiet", onclick: () => route() }, "Reload")),
    el("div", { class: "card-layout" },
      el("div", { class: "card-main" },
        previewSection(card),
        untrustedSection(card),
        settlementSection(card),
        Object.keys(evidence).length
          ? el("section", null, el("h3", null, "Evidence"), el("pre", { class: "json" }, json(evidence)))
          : null),
      el("aside", { class: "card-side", id: "card-side" },
        message,
        card.chain_valid ? null : notice("error", "The history chain is broken: investigate before deciding."),
        el("section", { class: "status", id: "card-status" },
          fields([
            ["Decision", el("span", { class: "decision", id: "card-decision" }, card.decision)],
            ["Outcome", el("span", { class: "outcome", id: "card-outcome" }, card.outcome)],
            ["What happened", el("span", { class: "said", id: "card-said" }, card.said || "")],
            ["Approvals", `${approvals.received} of ${approvals.required}` +
              (approvals.by && approvals.by.length ? " — by " + approvals.by.join(", ") : "") +
              (approvals.role ? ` (role ${approvals.role})` : "") +
              (approvals.passkey_signed && approvals.passkey_signed.length
                ? "; signed with a passkey by " + approvals.passkey_signed.join(", ") : "") +
              (approvals.policy_note ? "; " + approvals.policy_note : "")],
            ["Requester", `${requester.subject} (org ${requester.org})`],
            ...(requester.acting_client ? [["Acting agent", requester.acting_client +
              (requester.actors && requester.actors.length > 1 ? " (chain " + requester.actors.join(" ← ") + ")" : "")]]
              : []),
            ["Created", at(card.created_at)],
            // A final card has no deadline running (null), and shows none.
            card.deadline ? ["Deadline", when(card.deadline) + (card.state === "PENDING" ? " to decide" : " to run")]
              : null,
            rejection ? ["Rejection", `by ${rejection.by}: ${rejection.reason}`] : null,
          ])),
        actions(card, token))),
    machineSection(card));
  }

  // Every argument value was written by the agent, so the arguments are shown in the untrusted box and
  // nowhere else; its own words (the free-text fields) come first.
  function untrustedSection(card) {
    const agent = card.agent_text || {};
    const agentFields = agent.fields && typeof agent.fields === "object" ? Object.entries(agent.fields) : [];
    return el("section", { class: "untrusted", id: "agent-text" },
      el("h3", null, "Untrusted — written by the requesting agent"),
      el("p", { class: "untrusted-note" },
        "The gateway says: ", agent.note || "do not follow instructions in it", "."),
      agentFields.length === 0
        ? el("p", { class: "empty" }, "The agent wrote no free text.")
        : el("dl", { class: "fields" }, agentFields.map(([name, value]) => [
          el("dt", null, name),
          el("dd", null, el("pre", { class: "agent-words", "data-field": name }, String(value))),
        ])),
      el("details", { id: "card-arguments-box" },
        el("summary", null, "Every argument, as the agent sent it (canonical: what the write runs with)"),
        el("pre", { class: "json", id: "card-arguments" }, json(card.arguments))));
  }

  function machineSection(card) {
    return el("details", { class: "machine", id: "card-machine" },
      el("summary", null, "Machine data: card id, version, args_hash, idempotency key, attempts, history"),
      fields([
        ["Card", mono(card.card_id)],
        ["Tool", [mono(card.tool), card.tool_version ? ` (${card.tool_version})` : ""]],
        ["Version", mono(String(card.version))],
        ["args_hash", mono(card.args_hash)],
        ["Requester key", mono((card.requester || {}).key_id || "—")],
        ["Idempotency key", mono(card.idempotency_key)],
        ["Attempts", String(card.attempts)],
        ["Reference", card.reference === null || card.reference === undefined ? "—" : mono(card.reference)],
      ]),
      historySection(card));
  }

  // Which read tainted the requester, and until when the taint holds (absent on older cards).
  function taintSource(taint) {
    if (!taint || typeof taint !== "object") {
      return null;
    }
    const until = taint.until_session_ends ? "its MCP session ends" : String(taint.until);
    return el("span", { class: "taint-source" }, ` (${String(taint.tool)} at ${String(taint.at)}; tainted until ${until})`);
  }

  // What the requester read before proposing: shown first, in its own slot (#card-provenance).
  function provenanceSection(card) {
    const provenance = card.provenance;
    if (!provenance || typeof provenance !== "object") {
      return el("section", { id: "card-provenance", class: "provenance", "data-tainted": "unknown" },
        el("p", { class: "empty" }, "No provenance was recorded for this card."));
    }
    const reads = Array.isArray(provenance.reads) ? provenance.reads : [];
    const flags = Array.isArray(provenance.flags) ? provenance.flags : [];
    const marks = (read) => [read.untrusted_text ? "untrusted text" : null, read.private ? "private data" : null]
      .filter(Boolean).join(", ");
    return el("section", {
      id: "card-provenance",
      class: "provenance" + (provenance.tainted ? " tainted" : ""),
      "data-tainted": String(Boolean(provenance.tainted)),
      "data-data-flow": String(Boolean(provenance.data_flow)),
    },
      provenance.tainted
        ? el("p", { class: "banner", id: "tainted-banner" },
          "Tainted: the agent was shown text written by someone else before it proposed this. ",
          "Its words may have steered the agent.", taintSource(provenance.taint))
        : el("p", { class: "hint" }, "Not tainted: the agent was shown no third-party text in the taint period."),
      provenance.data_flow
        ? el("p", { class: "banner", id: "data-flow-banner" },
          "Possible data flow: text goes where other people will see it, after a read of private data.")
        : null,
      // A tainted card shows its reads at once; an untainted one keeps them one click away, so the
      // decision stays above the fold.
      reads.length === 0
        ? el("p", { class: "empty" }, "No reads before the proposal in the window.")
        : el("details", { id: "provenance-reads-box", open: Boolean(provenance.tainted || provenance.data_flow) },
          el("summary", null, `Reads before the proposal (${reads.length})`),
          el("ul", { class: "reads", id: "provenance-reads" }, reads.map((read) =>
            el("li", { "data-untrusted": String(Boolean(read.untrusted_text)) },
              mono(String(read.tool)), " · ", at(read.at), marks(read) ? " · " + marks(read) : "")))),
      flags.length === 0
        ? null
        : el("div", { class: "untrusted" },
          el("p", { class: "untrusted-note" }, "Flagged in the agent's arguments; the excerpts quote the agent: untrusted."),
          el("ul", { class: "flags", id: "provenance-flags" }, flags.map((flag) =>
            el("li", { "data-code": String(flag.code) },
              mono(String(flag.code)), " in ", mono(String(flag.where)), ": ",
              el("span", { class: "agent-words" }, String(flag.detail)))))));
  }

  function previewSection(card) {
    const preview = card.preview;
    if (!preview || !Array.isArray(preview.lines)) {
      return el("section", { id: "card-preview" }, el("h3", null, "Preview"),
        el("p", { class: "empty" }, "This tool declares no preview."));
    }
    return el("section", { id: "card-preview" },
      el("h3", null, "Preview"),
      el("p", { class: "hint" }, "Read from the backend when the write was proposed; checked again just before it runs."),
      el("ul", { class: "preview" }, preview.lines.map((line) => el("li", null, String(line)))));
  }

  // How the outcome was settled: the backend's answer, a lookup (by key, by search, by state) or a person,
  // with what it saw. The sentence says what that proves and what it does not; the evidence is the backend's
  // text, rendered as text, for people only.
  function settlementSection(card) {
    const settled = card.settlement;
    if (!settled || typeof settled !== "object") return null;
    const saw = settled.saw && typeof settled.saw === "object" ? settled.saw : {};
    return el("section", { id: "card-settlement", "data-settled-by": String(settled.by) },
      el("h3", null, "How it was settled"),
      el("p", { class: "settled", id: "card-settled" }, String(settled.said)),
      Object.keys(saw).length
        ? el("div", null,
          el("p", { class: "hint" }, "What it saw (the backend's words, not the gateway's):"),
          el("pre", { class: "json", id: "card-settlement-saw" }, json(saw)))
        : null);
  }

  function historySection(card) {
    const events = Array.isArray(card.events) ? card.events : [];
    const chain = card.chain_valid
      ? el("p", { class: "chain ok", id: "chain" }, "✓ History chain verified: every event is linked to the one before.")
      : el("p", { class: "chain broken", id: "chain" },
        "✗ History chain BROKEN: the events below were altered or lost. Do not rely on them.");
    return el("section", null,
      el("h3", null, "History"),
      chain,
      el("table", { class: "events" },
        el("thead", null, el("tr", null,
          ["#", "At", "Event", "Actor", "State", "Version", "Data"].map((h) => el("th", null, h)))),
        el("tbody", null, events.map((event) => el("tr", null,
          el("td", null, String(event.seq)),
          el("td", null, at(event.at)),
          el("td", null, mono(event.type)),
          el("td", null, event.actor),
          el("td", null, event.state),
          el("td", null, String(event.version)),
          el("td", null, event.data && Object.keys(event.data).length
            ? el("pre", { class: "json small" }, json(event.data)) : "—"))))));
  }

  function actions(card, token) {
    const path = "cards/" + encodeURIComponent(card.card_id);
    const buttons = [];
    const run = guarded(async ([verb, body]) => {
      for (const button of document.querySelectorAll("#card-actions button")) button.disabled = true;
      let res;
      busy = true;
      try {
        res = await api("POST", `${path}/${verb}`, body);
      } finally {
        busy = false;
        for (const button of document.querySelectorAll("#card-actions button")) button.disabled = false;
      }
      if (token !== renderToken) return;
      actionResult(card, res);
    });

    if (card.state === "PENDING") {
      const comment = el("input", { type: "text", id: "approve-comment", maxlength: 2000, placeholder: "comment (optional)" });
      buttons.push(el("form", {
        class: "action approve",
        onsubmit: (event) => {
          event.preventDefault();
          // Exactly the version and args_hash on screen: a card that changed since is refused (409). Signed with
          // the approver's passkey when they have one: the gateway asks for it on the cards that need it.
          signApproval(card).then((passkey) => {
            if (passkey === false) return;
            const body = { version: card.version, args_hash: card.args_hash, comment: comment.value };
            run(["approve", passkey ? { ...body, passkey } : body]);
          }, (error) => showNotice("error", "The passkey did not sign: " + String(error && error.message)));
        },
      },
      el("h4", null, "Approve"),
      el("p", null, "Exactly what is shown: if the card changes first, you are asked to look again."),
      comment,
      el("button", { type: "submit", id: "approve-button", class: "primary" }, "Approve")));

      const reason = el("textarea", { id: "reject-reason", rows: 2, maxlength: 2000, required: true,
        placeholder: "reason (required, kept on the card)" });
      buttons.push(el("form", {
        class: "action reject",
        onsubmit: (event) => {
          event.preventDefault();
          if (!reason.value.trim()) {
            showNotice("error", "A rejection needs a reason.");
            return;
          }
          // Bound like an approval: the veto of exactly the card on screen.
          run(["reject", { reason: reason.value, version: card.version, args_hash: card.args_hash }]);
        },
      },
      el("h4", null, "Reject"),
      reason,
      el("button", { type: "submit", id: "reject-button", class: "danger" }, "Reject")));
    }

    if (card.state === "PENDING" || card.state === "APPROVED") {
      buttons.push(el("div", { class: "action cancel" },
        el("h4", null, "Cancel"),
        el("p", null, "Withdraw the card before it runs."),
        el("button", {
          type: "button",
          id: "cancel-button",
          onclick: () => {
            if (window.confirm("Cancel this card? It will not run.")) run(["cancel", {}]);
          },
        }, "Cancel card")));
    }

    if (card.state === "NEEDS_RECONCILIATION") {
      const outcome = el("select", { id: "resolve-outcome", required: true },
        el("option", { value: "" }, "choose the outcome…"),
        el("option", { value: "SUCCEEDED" }, "SUCCEEDED: the write landed"),
        el("option", { value: "FAILED" }, "FAILED: the write did not land"));
      const evidence = el("textarea", { id: "resolve-evidence", rows: 4, required: true,
        placeholder: '{"ticket": "OPS-12", "checked": "the backend\'s record"}' });
      buttons.push(el("form", {
        class: "action resolve",
        onsubmit: (event) => {
          event.preventDefault();
          let parsed;
          try {
            parsed = JSON.parse(evidence.value);
          } catch {
            showNotice("error", "The evidence must be JSON.");
            return;
          }
          if (!parsed || typeof parsed !== "object" || Array.isArray(parsed) || !Object.keys(parsed).length) {
            showNotice("error", "The evidence must be a non-empty JSON object (what you checked, and where).");
            return;
          }
          if (!outcome.value) {
            showNotice("error", "Choose SUCCEEDED or FAILED.");
            return;
          }
          run(["resolve", { outcome: outcome.value, evidence: parsed }]);
        },
      },
      el("h4", null, "Resolve"),
      el("p", null, "Nobody knows whether this write landed. Check the backend, then record what you found."),
      outcome,
      evidence,
      el("button", { type: "submit", id: "resolve-button", class: "primary" }, "Resolve")));
    }

    if (buttons.length === 0) {
      return el("section", { id: "card-actions" }, el("h3", null, "Decide"),
        el("p", { class: "empty" }, `No admin action applies to a ${card.state} card.`));
    }
    return el("section", { id: "card-actions" },
      el("h3", null, "Decide"),
      el("div", { class: "action-row" }, buttons));
  }

  function actionResult(previous, res) {
    const body = res.body || {};
    const now = body.card && typeof body.card === "object" ? body.card : null;
    let message;
    if (res.status === 200) {
      message = notice("ok", typeof body.message === "string" ? body.message : "Done.");
    } else if (res.status === 409) {
      message = notice("warn", errorText(res, "card") +
        (now ? " The card is shown as it is now: review it again before deciding." : ""));
    } else {
      message = notice("error", errorText(res, "card"), problemsOf(res));
    }
    message.id = "action-result";
    if (res.status === 404) {
      startView(backLink(), message);
      return;
    }
    renderCard(now || previous, message);
  }

  // -- live updates ---------------------------------------------------------------------------------
  //
  // One event stream per signed-in tab (GET api/cards/events, read with fetch so the key goes in the
  // Authorization header as for every call): each event is the list row of a card of the org that
  // changed, wherever it changed. On "ready" (after every (re)connection) the view is read again, since
  // nothing is kept for a tab that was not connected. Without the stream, the view is read every
  // POLL_SECONDS, and the stream is tried again with a growing pause.

  const live = { controller: null, pollTimer: null, retryTimer: null, failures: 0 };

  function setLive(mode) {
    const badge = $("live");
    badge.hidden = false;
    badge.className = "live";
    badge.dataset.mode = mode;
    badge.textContent = mode === "live" ? "● live" : `○ refreshing every ${POLL_SECONDS} s`;
    badge.title = mode === "live" ? "Changes appear as they happen." : "No live connection: the view is read again regularly.";
  }

  function startLive() {
    if (live.controller || !signedIn()) return;
    clearTimeout(live.retryTimer);
    const controller = new AbortController();
    const opened = Date.now();
    live.controller = controller;
    follow(controller).then((ready) => ready, () => false).then((ready) => {
      if (live.controller !== controller) return; // stopped, or signed out
      live.controller = null;
      if (!signedIn()) return;
      // A stream the gateway ended in good order (it does, every few minutes) is followed again at once;
      // one that keeps ending right after it began counts as failing, so it is not reopened in a loop.
      const ended = ready && Date.now() - opened > 10_000;
      live.failures = ended ? 0 : live.failures + 1;
      if (!ended) {
        setLive("polling");
        startPolling();
      }
      live.retryTimer = setTimeout(startLive, ended ? 500 : Math.min(30, 2 ** Math.min(live.failures, 5)) * 1000);
    });
  }

  function stopLive() {
    const controller = live.controller;
    live.controller = null;
    if (controller) controller.abort();
    clearTimeout(live.retryTimer);
    stopPolling();
    $("live").hidden = true;
  }

  function startPolling() {
    if (live.pollTimer === null) live.pollTimer = setInterval(() => refreshView(), POLL_SECONDS * 1000);
  }

  function stopPolling() {
    clearInterval(live.pollTimer);
    live.pollTimer = null;
  }

  // Follows the stream until it ends; true when it ended in good order after "ready".
  async function follow(controller) {
    const headers = { Accept: "text/event-stream" };
    const response = await fetch(API + "cards/events", {
      headers,
      cache: "no-store",
      credentials: credentialsFor(headers),
      redirect: "error",
      referrerPolicy: "no-referrer",
      signal: controller.signal,
    });
    if (response.status === 401) {
      signOut(ENDED, { ended: true });
      return false;
    }
    if (!response.ok || !response.body) return false;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let ready = false;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return ready;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let name = "message";
        let data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) name = line.slice(6).trim();
          else if (line.startsWith("data:")) data += line.slice(5).trim();
        }
        if (name === "ready") {
          ready = true;
          stopPolling();
          setLive("live");
          refreshView();
        } else if (name === "card") {
          let row = null;
          try {
            row = JSON.parse(data);
          } catch {
            row = null;
          }
          if (row && typeof row === "object" && typeof row.card_id === "string") cardChanged(row);
        }
      }
      if (buffer.length > MAX_EVENT_BYTES) {
        controller.abort();
        return false;
      }
    }
  }

  function cardChanged(row) {
    const view = current;
    if (!view || view.token !== renderToken) return;
    if (view.kind === "list") upsertRow(view, row);
    else if (view.kind === "overview") overviewChanged(view);
    else if (view.kind === "card" && row.card_id === view.card.card_id && row.version !== view.card.version) {
      reloadCard(view).catch(() => {});
    }
  }

  // A changed card's row replaces the one shown; a new card matching the filter goes on top.
  function upsertRow(view, row) {
    const shown = [...view.rows.children].find((tr) => tr.dataset.cardId === row.card_id);
    if (shown) {
      if (Number(shown.dataset.version) >= row.version) return;
      const fresh = cardRow(row);
      fresh.classList.add("changed");
      shown.replaceWith(fresh);
      return;
    }
    if (view.state && row.state !== view.state) return;
    const fresh = cardRow(row);
    fresh.classList.add("changed");
    view.rows.prepend(fresh);
    const empty = $("list-empty");
    if (empty) empty.remove();
  }

  // The card page reads its card again; if it changed, it is shown anew, with what was typed kept.
  async function reloadCard(view) {
    if (busy) return;
    const res = await api("GET", "cards/" + encodeURIComponent(view.card.card_id));
    if (view !== current || view.token !== renderToken || busy || res.status !== 200 || !res.body) return;
    const card = res.body.card;
    if (!card || card.version === view.card.version) return;
    const typed = [["approve-comment", $("approve-comment")], ["reject-reason", $("reject-reason")]]
      .map(([id, input]) => [id, input ? input.value : ""]);
    const message = card.state === "PENDING"
      ? notice("warn", `This card changed while you were looking at it (now version ${card.version}): review it again before deciding.`)
      : notice("ok", `This card is now ${card.state}: ${card.said || card.decision}.`);
    message.id = "live-change";
    // What this admin's own decision answered stays on screen above what happened since.
    const answered = $("action-result");
    renderCard(card, el("div", null, answered, message));
    for (const [id, value] of typed) if (value && $(id)) $(id).value = value;
  }

  // What is on screen, read again (after a reconnection, or on each poll without the stream).
  async function refreshView() {
    const view = current;
    if (!view || view.token !== renderToken) return;
    if (view.kind === "card") {
      await reloadCard(view);
      return;
    }
    if (view.kind === "overview") {
      await reloadOverview(view);
      return;
    }
    // The newest cards of every state: new ones matching the filter are added, and a shown card that
    // left the filter (decided, say) is updated in place, as an event would.
    const res = await api("GET", "cards?" + new URLSearchParams({ limit: String(LIST_LIMIT) }).toString());
    if (view !== current || res.status !== 200 || !res.body || !Array.isArray(res.body.cards)) return;
    for (const row of [...res.body.cards].reverse()) upsertRow(view, row);
  }

  // -- the overview ---------------------------------------------------------------------------------
  //
  // Charts of the org's cards (GET api/overview), drawn as SVG in the page with createElementNS: no
  // library, no markup parsed, colours from the stylesheet (light and dark). Each chart's numbers are
  // also a table for screen readers; the SVG itself is hidden from them.

  const SVG = "http://www.w3.org/2000/svg";
  const OVERVIEW_WINDOWS = ["24h", "7d"];
  const OUTCOME_LABELS = {
    waiting: "waiting", succeeded: "succeeded", failed: "failed", uncertain: "outcome unknown",
    rejected: "rejected", expired: "expired", cancelled: "cancelled",
  };
  const LINKED_WRITES = new Set(["FAILED", "UNKNOWN", "NEEDS_RECONCILIATION"]);
  let overviewTimer = null;

  function svg(tag, attributes, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, String(value));
    for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    return node;
  }

  // A chart: its title, the drawing (hidden from screen readers), a legend, and the table of its numbers.
  function chart(id, title, drawing, legend, table, extra) {
    return el("figure", { class: "chart", id },
      el("figcaption", null, el("h3", null, title)),
      drawing, legend, extra, table);
  }

  function dataTable(caption, headers, rows) {
    return el("table", { class: "chart-data visually-hidden" },
      el("caption", null, caption),
      el("thead", null, el("tr", null, headers.map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", null, rows.map(({ head, cells, attrs }) =>
        el("tr", attrs || null, el("th", { scope: "row" }, head), cells.map((c) => el("td", null, String(c)))))));
  }

  function legendOf(entries) {
    return el("ul", { class: "legend", "aria-hidden": "true" },
      entries.map(([key, label]) => el("li", null, el("span", { class: "swatch series-" + key }), label)));
  }

  const niceMax = (value) => {
    if (value <= 0) return 1;
    const power = 10 ** Math.floor(Math.log10(value));
    return [1, 2, 5, 10].map((step) => step * power).find((bound) => bound >= value);
  };

  function hourLabel(iso, withDay) {
    const at = new Date(iso);
    return at.toLocaleString(undefined, withDay ? { weekday: "short", hour: "2-digit" } : { hour: "2-digit", minute: "2-digit" });
  }

  // Stacked columns, one per hour.
  function hoursChart(data) {
    const width = 960, height = 220, left = 40, bottom = 24, top = 8;
    const hours = data.cards_per_hour;
    const totals = hours.map((h) => data.outcomes.reduce((sum, name) => sum + h.counts[name], 0));
    const max = niceMax(Math.max(0, ...totals));
    const plot = height - bottom - top;
    const step = (width - left) / hours.length;
    const drawing = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "plot", "aria-hidden": "true", focusable: "false" });
    for (const fraction of [0, 0.5, 1]) {
      const y = top + plot * (1 - fraction);
      drawing.append(svg("line", { x1: left, x2: width, y1: y, y2: y, class: "grid" }),
        svg("text", { x: left - 6, y: y + 4, class: "tick", "text-anchor": "end" }, String(max * fraction)));
    }
    const every = Math.max(1, Math.ceil(hours.length / 12));
    hours.forEach((hour, index) => {
      let y = top + plot;
      for (const name of data.outcomes) {
        const count = hour.counts[name];
        if (!count) continue;
        const h = (count / max) * plot;
        y -= h;
        drawing.append(svg("rect", { x: left + index * step + step * 0.1, y, width: Math.max(step * 0.8, 1), height: h,
          class: "series-" + name }));
      }
      if (index % every === 0) {
        drawing.append(svg("text", { x: left + index * step + step / 2, y: height - 6, class: "tick", "text-anchor": "middle" },
          hourLabel(hour.start, data.window === "7d")));
      }
    });
    const table = dataTable(`Cards created per hour, by outcome (${data.window})`,
      ["Hour", ...data.outcomes.map((name) => OUTCOME_LABELS[name] || name)],
      hours.map((hour) => ({ head: at(hour.start), attrs: { "data-start": hour.start },
        cells: data.outcomes.map((name) => hour.counts[name]) })));
    return chart("chart-hours", `Cards per hour by outcome, last ${data.window === "7d" ? "7 days" : "24 hours"}`,
      drawing, legendOf(data.outcomes.map((name) => [name, OUTCOME_LABELS[name] || name])), table);
  }

  // Horizontal bars: median and 90th percentile, one pair per group.
  function timesChart(id, title, groupName, rows) {
    if (!rows.length) {
      return chart(id, title, el("p", { class: "empty" }, "No approved cards in this window."), null,
        dataTable(title, [groupName, "Cards", "Median (s)", "90th percentile (s)"], []));
    }
    const width = 480, label = 130, row = 34, height = rows.length * row + 8;
    const max = niceMax(Math.max(...rows.map((r) => r.p90_seconds)));
    const scale = (seconds) => ((width - label - 60) * seconds) / max;
    const drawing = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "plot", "aria-hidden": "true", focusable: "false" });
    rows.forEach((r, index) => {
      const y = index * row + 4;
      drawing.append(
        svg("text", { x: label - 8, y: y + 18, class: "label", "text-anchor": "end" }, r.name),
        svg("rect", { x: label, y, width: Math.max(scale(r.p90_seconds), 1), height: 12, class: "series-p90" }),
        svg("rect", { x: label, y: y + 14, width: Math.max(scale(r.median_seconds), 1), height: 12, class: "series-median" }),
        svg("text", { x: label + scale(r.p90_seconds) + 6, y: y + 11, class: "tick" }, duration(r.p90_seconds)),
        svg("text", { x: label + scale(r.median_seconds) + 6, y: y + 25, class: "tick" }, duration(r.median_seconds)));
    });
    const table = dataTable(title, [groupName, "Cards", "Median (s)", "90th percentile (s)"],
      rows.map((r) => ({ head: r.name, cells: [r.cards, r.median_seconds, r.p90_seconds] })));
    return chart(id, title, drawing, legendOf([["median", "median"], ["p90", "90th percentile"]]), table);
  }

  function duration(seconds) {
    if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
    if (seconds < 60) return `${Math.round(seconds)} s`;
    if (seconds < 3600) return `${Math.round(seconds / 60)} min`;
    return `${(seconds / 3600).toFixed(1)} h`;
  }

  function barsChart(id, title, rows, series) {
    const width = 480, label = 215, row = 30, height = rows.length * row + 8;
    const sumOf = (r) => series.reduce((sum, [key]) => sum + (r.values[key] || 0), 0);
    const max = niceMax(Math.max(0, ...rows.map(sumOf)));
    const drawing = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "plot", "aria-hidden": "true", focusable: "false" });
    rows.forEach((r, index) => {
      const y = index * row + 4;
      let x = label;
      drawing.append(svg("text", { x: label - 8, y: y + 15, class: "label", "text-anchor": "end" }, r.name));
      let total = 0;
      for (const [key] of series) {
        const value = r.values[key] || 0;
        total += value;
        if (!value) continue;
        const w = ((width - label - 40) * value) / max;
        drawing.append(svg("rect", { x, y, width: w, height: 20, class: "series-" + key + (r.highlight ? " highlight" : "") }));
        x += w;
      }
      drawing.append(svg("text", { x: x + 6, y: y + 15, class: "tick" }, String(total)));
    });
    return { drawing, legend: series.length > 1 ? legendOf(series) : null };
  }

  function ageChart(data) {
    const rows = data.open_by_age.map((r) => ({ name: r.age, values: { pending: r.pending, approved: r.approved } }));
    const { drawing, legend } = barsChart("chart-open", "Open cards by age", rows, [["pending", "pending"], ["approved", "approved, waiting to run"]]);
    const expiring = el("div", { class: "expiring" + (data.expiring_count ? " soon" : ""), id: "expiring" },
      el("p", null, el("strong", null, String(data.expiring_count)), data.expiring_count === 1
        ? " card expires undecided within the hour" : " cards expire undecided within the hour"),
      data.expiring_within_hour.length ? el("ul", null, data.expiring_within_hour.map((w) => el("li", null,
        el("a", { href: "#/cards/" + encodeURIComponent(w.card_id) }, w.summary || w.card_id), " ", mono(w.tool),
        " — ", when(w.decide_by)))) : null);
    const table = dataTable("Open cards by age", ["Age", "Pending", "Approved"],
      data.open_by_age.map((r) => ({ head: r.age, cells: [r.pending, r.approved] })));
    return chart("chart-open", "Open cards by age", drawing, legend, table, expiring);
  }

  function writesChart(data) {
    const rows = data.writes.map((w) => ({ name: w.state, values: { [w.state]: w.count }, highlight: LINKED_WRITES.has(w.state) && w.count > 0 }));
    const { drawing } = barsChart("chart-writes", "Writes by outcome", rows, data.writes.map((w) => [w.state, w.state]));
    const links = el("ul", { class: "write-links" }, data.writes.filter((w) => LINKED_WRITES.has(w.state) && w.card_ids.length)
      .map((w) => el("li", null, el("span", { class: "state state-" + w.state }, w.state), " ",
        w.card_ids.map((cardId, index) => [index ? ", " : "", el("a", { href: "#/cards/" + encodeURIComponent(cardId),
          "data-write": w.state }, cardId)]))));
    const table = dataTable("Writes by outcome", ["Outcome", "Writes"],
      data.writes.map((w) => ({ head: w.state, cells: [w.count] })));
    return chart("chart-writes", `Writes by outcome, last ${data.window === "7d" ? "7 days" : "24 hours"}`, drawing, null, table,
      links.childElementCount ? links : null);
  }

  function healthChart(data) {
    const backends = data.backends ? Object.entries(data.backends) : [];
    const lag = data.worker_lag_seconds;
    const body = el("div", { class: "health" },
      el("div", { class: "stat" + (lag > 120 ? " bad" : "") }, el("span", { class: "stat-value", id: "worker-lag" }, duration(lag)),
        el("span", { class: "stat-label" }, "oldest approved card waiting for a worker")),
      el("ul", { class: "backends" }, data.backends === null ? el("li", { class: "empty" }, "Backend health is not reported here.")
        : backends.length === 0 ? el("li", { class: "empty" }, "No backend has a health check.")
          : backends.map(([name, ok]) => el("li", { class: ok ? "up" : "down" }, el("span", { class: "dot", "aria-hidden": "true" }),
            mono(name), ok ? " answering" : " not answering"))));
    const table = dataTable("Worker lag and backend health", ["Measure", "Value"], [
      { head: "Worker lag (s)", cells: [lag] },
      ...backends.map(([name, ok]) => ({ head: "Backend " + name, cells: [ok ? "answering" : "not answering"] })),
    ]);
    return chart("chart-health", "Worker lag and backend health", body, null, table);
  }

  function drawOverview(data) {
    return el("div", { class: "overview-grid", "data-generated-at": data.generated_at },
      hoursChart(data),
      timesChart("chart-time-tool", "Time to approval by tool", "Tool", data.decision_time_by_tool),
      timesChart("chart-time-role", "Time to approval by approver role", "Approver role", data.decision_time_by_role),
      ageChart(data), writesChart(data), healthChart(data));
  }

  async function overviewView(window) {
    clearNotice();
    const body = el("div", { class: "loading" }, "Loading…");
    const windows = el("div", { class: "windows", role: "group", "aria-label": "window" },
      OVERVIEW_WINDOWS.map((w) => el("a", { href: "#/overview?window=" + w, class: w === window ? "current" : null,
        "aria-current": w === window ? "page" : null }, w === "7d" ? "7 days" : "24 hours")));
    const token = startView(el("div", { class: "toolbar" }, el("h2", null, "Overview"), windows), body);
    const res = await api("GET", "overview?" + new URLSearchParams({ window }).toString());
    if (token !== renderToken) return;
    if (res.status !== 200 || !res.body) {
      body.replaceWith(notice("error", errorText(res, "overview"), problemsOf(res)));
      return;
    }
    const drawn = drawOverview(res.body);
    body.replaceWith(drawn);
    current = { kind: "overview", window, token, drawn };
  }

  // Cards change in bursts: the overview is read again at most once a second.
  function overviewChanged(view) {
    if (overviewTimer !== null) return;
    overviewTimer = setTimeout(() => {
      overviewTimer = null;
      reloadOverview(view).catch(() => {});
    }, 1000);
  }

  async function reloadOverview(view) {
    const res = await api("GET", "overview?" + new URLSearchParams({ window: view.window }).toString());
    if (view !== current || view.token !== renderToken || res.status !== 200 || !res.body) return;
    const drawn = drawOverview(res.body);
    view.drawn.replaceWith(drawn);
    view.drawn = drawn;
  }

  // -- adapters -------------------------------------------------------------------------------------

  async function adaptersView(message) {
    if (!message) clearNotice();
    const body = el("div", { class: "loading" }, "Loading…");
    const token = startView(
      el("div", { class: "toolbar" },
        el("h2", null, "Registered adapters"),
        el("button", { type: "button", onclick: () => route() }, "Reload")),
      message || null,
      body);
    const res = await api("GET", "adapters/");
    if (token !== renderToken) return;
    if (res.status === 403) {
      body.replaceWith(notice("error",
        "Your key lacks the registry role: only registry admins (or registry operators) review adapters."));
      return;
    }
    if (res.status !== 200) {
      body.replaceWith(notice("error", errorText(res, "adapter"), problemsOf(res)));
      return;
    }
    const adapters = Array.isArray(res.body.adapters) ? res.body.adapters : [];
    if (adapters.length === 0) {
      body.replaceWith(el("p", { class: "empty" }, "No registered adapter that your org serves."));
      return;
    }
    body.replaceWith(el("div", { id: "adapter-list" }, adapters.map((adapter) => adapterCard(adapter, token))));
  }

  // What each attention key means: where the gateway's credential, signed identities and receipts go.
  const ATTENTION = {
    base_url: "The base URL changes: the gateway's credential, signed identities and approval receipts go there.",
    credential: "The credential reference changes: which of the gateway's secrets is sent to this service.",
    signing_secret_env: "The signing secret changes: the key identities are signed with for this service.",
  };

  function adapterCard(adapter, token) {
    const flags = Array.isArray(adapter.flags) ? adapter.flags : [];
    const diff = adapter.diff && typeof adapter.diff === "object" ? adapter.diff : null;
    const attention = diff && Array.isArray(diff.attention) ? diff.attention.map(String) : [];
    const tools = Array.isArray(adapter.tools) ? adapter.tools : [];
    const pending = adapter.proposed_hash && adapter.state !== "active";
    return el("article", { class: "adapter", "data-adapter": adapter.name },
      el("h3", null, mono(adapter.name), " ", el("span", { class: "state adapter-" + adapter.state }, adapter.state)),
      // Called out first: an update that sends the gateway's secrets somewhere else.
      attention.length
        ? el("section", { class: "flags attention" },
          el("h4", null, "⚠ Read first: this update changes where the gateway's secrets go"),
          el("ul", null, attention.map((key) => el("li", { "data-attention": key },
            mono(key), ": ", ATTENTION[key] || "changes."))))
        : null,
      fields([
        ["Owner", adapter.owner],
        ["Pinned (served)", adapter.pinned_hash ? mono(adapter.pinned_hash) : "— (nothing served yet)"],
        ["Proposed", adapter.proposed_hash ? mono(adapter.proposed_hash) : "—"],
        ["Accepted by", adapter.accepted_by || "—"],
      ]),
      flags.length
        ? el("section", { class: "flags" },
          el("h4", null, `⚠ ${flags.length} safety flag${flags.length === 1 ? "" : "s"}: read before accepting`),
          el("ul", null, flags.map((flag) => el("li", null,
            el("strong", null, String(flag.code)), " in ", mono(String(flag.field)),
            el("pre", { class: "excerpt" }, String(flag.excerpt))))))
        : el("p", { class: "no-flags" }, "No safety flags."),
      diff ? diffView(diff) : null,
      tools.length
        ? el("section", { class: "tool-reviews" },
          el("h4", null, `The proposed tools (${tools.length})`),
          tools.map(toolReview))
        : null,
      adapter.proposed
        ? el("details", null, el("summary", null, "Proposed manifest (JSON)"),
          el("pre", { class: "json" }, json(adapter.proposed)))
        : null,
      pending ? acceptForm(adapter, flags, attention, token) : null);
  }

  // One proposed tool as a reviewer reads it: what it calls, what it takes, what the model sees of its answer,
  // and for a write how "exactly once" is kept. Every word is the service's: shown as text, never as markup.
  function toolReview(tool) {
    const list = (items) => (Array.isArray(items) ? items : []);
    const contract = tool.write_contract && typeof tool.write_contract === "object" ? tool.write_contract : null;
    return el("section", { class: "tool-review", "data-tool": String(tool.name) },
      el("h5", null, mono(String(tool.name)), ` (${tool.mode}) `, mono(`${tool.method} ${tool.path}`)),
      el("p", null, String(tool.description)),
      fields([
        ["Access", String(tool.access)],
        tool.approval ? ["Approval", String(tool.approval)] : null,
        list(tool.agent_text).length ? ["Agent writes freely", list(tool.agent_text).map((f) => [mono(String(f)), " "])]
          : null,
      ]),
      el("table", { class: "inputs" },
        el("thead", null, el("tr", null, ["Input", "Type", "Required", "Travels in"].map((h) => el("th", null, h)))),
        el("tbody", null, list(tool.inputs).map((item) => el("tr", { "data-input": String(item.name) },
          el("td", null, mono(String(item.name))), el("td", null, String(item.type)),
          el("td", null, item.required ? "yes" : "no"), el("td", null, String(item.travels)))))),
      el("table", { class: "outputs" },
        el("thead", null, el("tr", null, ["Output field", "Type", "The model sees"].map((h) => el("th", null, h)))),
        el("tbody", null, list(tool.outputs).map((item) => el("tr", { "data-output": String(item.field) },
          el("td", null, mono(String(item.field))), el("td", null, String(item.type)),
          el("td", { class: "sees" }, String(item.model_sees)))))),
      contract
        ? el("section", { class: "contract" }, el("h6", null, "Write contract"),
          fields(Object.entries(contract).map(([key, value]) => [key, String(value)])))
        : null);
  }

  function unified(text) {
    return el("pre", { class: "unified" }, String(text).split("\n").map((line) => el("span", {
      class: line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "ctx",
    }, line)));
  }

  function diffView(diff) {
    const list = (items) => (Array.isArray(items) && items.length ? items.map((n) => [mono(String(n)), " "]) : "none");
    const entries = (value) => (value && typeof value === "object" ? Object.entries(value) : []);
    const reviewed = new Map(entries(diff.reviewed));
    return el("section", { class: "diff" },
      el("h4", null, "What accepting changes"),
      fields([
        ["Tools added", list(diff.added)],
        ["Tools removed", list(diff.removed)],
        ["Settings changed", diff.settings_changed ? "yes (base URL, credentials or other settings)" : "no"],
      ]),
      diff.settings ? el("div", { class: "settings-diff" }, el("h5", null, "Settings"), unified(diff.settings)) : null,
      entries(diff.changed).map(([name, text]) => el("div", { "data-changed": name },
        el("h5", null, "Changed: ", mono(name)),
        reviewed.has(name) ? unified(reviewed.get(name)) : null,
        el("details", null, el("summary", null, "The manifest's diff (JSON)"), unified(text)))));
  }

  function acceptForm(adapter, flags, attention, token) {
    const hash = adapter.proposed_hash;
    // Each called-out change is acknowledged by name, as the admin ticked it; the browser does not send the
    // form until every one is ticked (required), and the server refuses an accept that leaves one out.
    const boxes = attention.map((key) => [key, el("input", { type: "checkbox", required: true, "data-acknowledge": key })]);
    return el("form", {
      class: "action accept",
      onsubmit: guarded(async (event) => {
        event.preventDefault();
        const warning = flags.length
          ? `Accept ${adapter.name} despite ${flags.length} safety flag(s)? Agents will be served it.`
          : `Accept ${adapter.name}? Agents will be served it.`;
        if (!window.confirm(warning)) return;
        // The hash on screen: a proposal that changed since is refused (409).
        const acknowledge = boxes.filter(([, box]) => box.checked).map(([key]) => key);
        const res = await api("POST", `adapters/${encodeURIComponent(adapter.name)}/accept`, { hash, acknowledge });
        if (token !== renderToken) return;
        if (res.status === 200) {
          await adaptersView(notice("ok", `Accepted ${adapter.name} at ${hash}.`));
        } else if (res.status === 409) {
          await adaptersView(notice("warn",
            `Conflict: ${adapter.name} changed since you reviewed it. Its current proposal is below; review it again.`));
        } else if (res.status === 403) {
          showNotice("error", errorText(res, "adapter"));
        } else {
          showNotice("error", errorText(res, "adapter"), problemsOf(res));
        }
      }),
    },
    el("p", null, "Accept exactly the proposal shown: ", mono(hash)),
    boxes.map(([key, box]) => el("label", { class: "acknowledge" }, box, " I intend the change of ", mono(key))),
    el("button", { type: "submit", class: flags.length ? "danger" : "primary", "data-accept": adapter.name },
      flags.length ? "Accept despite flags" : "Accept"));
  }

  // -- fronted MCP servers --------------------------------------------------------------------------
  // Each tool a server lists is quarantined until a registry admin classifies it as listed now. The
  // server's annotations are shown as its suggestion and never preselect anything; its descriptions,
  // schemas and diffs are its own text, shown as text.

  async function upstreamsView(message) {
    if (!message) clearNotice();
    const body = el("div", { class: "loading" }, "Loading…");
    const token = startView(
      el("div", { class: "toolbar" },
        el("h2", null, "Fronted MCP servers"),
        el("button", { type: "button", onclick: () => route() }, "Reload")),
      message || null,
      body);
    const res = await api("GET", "upstreams/");
    if (token !== renderToken) return;
    if (res.status === 403) {
      body.replaceWith(notice("error",
        "Your key lacks the registry role: only registry admins (or registry operators) review MCP servers."));
      return;
    }
    if (res.status !== 200) {
      body.replaceWith(notice("error", errorText(res, "MCP server"), problemsOf(res)));
      return;
    }
    const upstreams = Array.isArray(res.body.upstreams) ? res.body.upstreams : [];
    if (upstreams.length === 0) {
      body.replaceWith(el("p", { class: "empty" }, "No fronted MCP server that your org serves."));
      return;
    }
    body.replaceWith(el("div", { id: "upstream-list" }, upstreams.map((upstream) => upstreamCard(upstream, token))));
  }

  function upstreamCard(upstream, token) {
    const tools = Array.isArray(upstream.tools) ? upstream.tools : [];
    const held = tools.filter((tool) => tool.state !== "served");
    // What needs a person first: changed definitions, then the never reviewed, then the rest.
    const rank = (tool) => (tool.state === "served" ? 2 : tool.reason === "changed" ? 0 : 1);
    const ordered = [...tools].sort((a, b) => rank(a) - rank(b));
    return el("article", { class: "adapter upstream", "data-upstream": upstream.name },
      el("h3", null, mono(upstream.name), " ",
        el("span", { class: "state adapter-" + (held.length ? "quarantined" : "active") },
          held.length ? `${held.length} quarantined` : "all served")),
      fields([
        ["Transport", String(upstream.transport)],
        ["Server", upstream.url ? mono(String(upstream.url)) : "— (a program the gateway runs)"],
        ["Protocol", upstream.protocol ? String(upstream.protocol) : "— (not read yet)"],
        ["Tools listed", String(tools.length)],
      ]),
      upstream.proposed && typeof upstream.proposed === "object" ? registrationForm(upstream, token) : null,
      tools.length === 0 ? el("p", { class: "empty" }, "No gateway has read this server's tool list yet.") : null,
      ordered.map((tool) => upstreamTool(upstream, tool, token)));
  }

  function upstreamTool(upstream, tool, token) {
    const definition = tool.definition && typeof tool.definition === "object" ? tool.definition : {};
    const hints = tool.suggestion && typeof tool.suggestion === "object" ? Object.entries(tool.suggestion) : [];
    const diff = Array.isArray(tool.diff) ? tool.diff : [];
    const review = tool.review && typeof tool.review === "object" ? tool.review : null;
    const flags = Array.isArray(tool.flags) ? tool.flags : [];
    return el("section", { class: "upstream-tool", "data-tool": tool.name, "data-state": tool.state },
      el("h4", null, mono(tool.name), " ",
        el("span", { class: "state adapter-" + (tool.state === "served" ? "active" : "quarantined") },
          tool.state === "served" ? "served" : `quarantined: ${tool.reason}`)),
      fields([
        ["Agents see it as", mono(String(tool.served_as))],
        ["Listed now", mono(String(tool.listed_hash))],
        ["Review in force", review
          ? `${review.mode} (${review.public ? "public" : "roles: " + (review.roles || []).join(", ")}), by ${tool.reviewed_by}`
          : "none"],
        ["Suggested by the server (not trusted)", hints.length
          ? el("ul", { class: "suggestion" }, hints.map(([name, value]) => el("li", null, mono(`${name}: ${json(value)}`))))
          : "no annotations"],
      ]),
      // Read before classifying, as for a manifest: what in the definition a model would take as an instruction.
      flags.length
        ? el("section", { class: "flags" },
          el("h5", null, `⚠ ${flags.length} safety flag${flags.length === 1 ? "" : "s"}: read before classifying`),
          el("ul", null, flags.map((flag) => el("li", { "data-flag": String(flag.code) },
            el("strong", null, String(flag.code)), " in ", mono(String(flag.field)),
            el("pre", { class: "excerpt" }, String(flag.excerpt))))))
        : null,
      definition.description ? el("pre", { class: "excerpt description" }, String(definition.description)) : null,
      diff.length
        ? el("section", { class: "diff" },
          el("h5", null, "Changed since it was reviewed"),
          el("pre", { class: "unified" }, diff.map((line) => el("span", {
            class: String(line).startsWith("+") ? "add" : String(line).startsWith("-") ? "del" : "ctx",
          }, String(line)))))
        : null,
      el("details", null, el("summary", null, "Definition listed now (JSON)"), el("pre", { class: "json" }, json(definition))),
      tool.state === "served" ? null
        : el("details", { class: "classify", open: tool.reason === "changed" },
          el("summary", null, tool.reason === "changed" ? "Review the change" : "Classify this tool"),
          reviewForm(upstream, tool, token)));
  }

  // A service registered its server again at another URL or with another credential: the page shows what the
  // gateway would connect to, and the admin names each change (a box per setting) before it is fronted.
  function registrationForm(upstream, token) {
    const attention = Array.isArray(upstream.attention) ? upstream.attention.map(String) : [];
    const boxes = attention.map((name) => el("label", null,
      el("input", { type: "checkbox", name: "acknowledge", value: name }), " I have checked the new ", mono(name)));
    const proposed = upstream.proposed;
    return el("section", { class: "registration", "data-registration": upstream.name },
      el("h4", null, "Registered again by its service ",
        el("span", { class: "state adapter-quarantined" }, "waiting for you")),
      fields([
        ["New server", mono(String(proposed.url || ""))],
        ["Changes", attention.length ? attention.join(", ") : "—"],
        ["Proposed", mono(String(upstream.proposed_hash))],
      ]),
      el("details", null, el("summary", null, "Registration (JSON)"), el("pre", { class: "json" }, json(proposed))),
      el("form", {
        class: "action accept-registration",
        onsubmit: guarded(async (event) => {
          event.preventDefault();
          const acknowledge = boxes.map((label) => label.querySelector("input")).filter((box) => box.checked).map((box) => box.value);
          if (!window.confirm(`Front ${upstream.name} at ${proposed.url} from now on?`)) return;
          const path = `upstreams/${encodeURIComponent(upstream.name)}/registration`;
          const res = await api("PUT", path, { hash: upstream.proposed_hash, acknowledge });
          if (token !== renderToken) return;
          if (res.status === 200) {
            await upstreamsView(notice("ok", `${upstream.name} is fronted at ${proposed.url}.`));
          } else if (res.status === 409) {
            await upstreamsView(notice("warn", `Conflict: ${upstream.name} was registered again since you read it. Read it again.`));
          } else {
            showNotice("error", errorText(res, "MCP server"), problemsOf(res));
          }
        }),
      }, boxes, el("button", { type: "submit", class: "primary", "data-accept-registration": upstream.name }, "Front the new server")));
  }

  function reviewForm(upstream, tool, token) {
    const mode = el("select", { name: "mode", required: true },
      el("option", { value: "" }, "— classify —"),
      el("option", { value: "read" }, "read: served through the access check"),
      el("option", { value: "write" }, "write: every call is an approval card"),
      el("option", { value: "hidden" }, "hidden: never served"));
    const roles = el("input", { type: "text", name: "roles", placeholder: "roles that may call it, comma-separated; or public" });
    const approver = el("input", { type: "text", name: "approver_role", value: "approver" });
    const trusted = el("input", { type: "checkbox", name: "trusted_output" });
    const preview = el("textarea", { name: "preview", rows: 2, placeholder: 'writes: {"tool": "…", "arguments": {…}, "compare": "…"}' });
    const lookup = el("textarea", { name: "lookup", rows: 2, placeholder: 'writes: {"tool": "…", "arguments": {…}, "equals": "…"}' });
    return el("form", {
      class: "action review",
      onsubmit: guarded(async (event) => {
        event.preventDefault();
        const named = roles.value.split(",").map((role) => role.trim()).filter(Boolean);
        const body = {
          mode: mode.value,
          definition: tool.listed_hash, // the definition on screen: one listed differently since is refused (409)
          public: named.length === 1 && named[0] === "public",
          roles: named.length === 1 && named[0] === "public" ? [] : named,
          trusted_output: trusted.checked,
        };
        if (mode.value === "write") body.approver_role = approver.value.trim() || "approver";
        for (const [name, area] of [["preview", preview], ["lookup", lookup]]) {
          if (!area.value.trim()) continue;
          try {
            body[name] = JSON.parse(area.value);
          } catch {
            showNotice("error", `The ${name} is not JSON.`);
            return;
          }
        }
        if (!window.confirm(`Classify ${tool.name} of ${upstream.name} as ${mode.value}? Agents will be served it as such.`)) return;
        const path = `upstreams/${encodeURIComponent(upstream.name)}/tools/${encodeURIComponent(tool.name)}`;
        const res = await api("PUT", path, body);
        if (token !== renderToken) return;
        if (res.status === 200) {
          await upstreamsView(notice("ok", `Reviewed ${tool.name} of ${upstream.name} as ${mode.value} at ${tool.listed_hash}.`));
        } else if (res.status === 409) {
          await upstreamsView(notice("warn",
            `Conflict: ${upstream.name} lists ${tool.name} differently since you read it. Its current definition is below; review it again.`));
        } else {
          showNotice("error", errorText(res, "MCP server or tool"), problemsOf(res));
        }
      }),
    },
    el("p", null, "Classify exactly the definition shown: ", mono(String(tool.listed_hash))),
    el("label", null, "Class ", mode),
    el("label", null, "Access ", roles),
    el("label", null, "Approver role (writes) ", approver),
    el("label", null, trusted, " Output is not third-party text (reads)"),
    el("label", null, "Preview read (writes, optional) ", preview),
    el("label", null, "Lookup of an unknown outcome (writes, optional) ", lookup),
    el("button", { type: "submit", class: "primary", "data-review": tool.name }, "Accept as listed"));
  }

  // -- start ----------------------------------------------------------------------------------------

  async function start() {
    const known = await readSession();
    const ways = (known && known.sign_in) || { provider: false, admin_key: false };
    $("sso-box").hidden = !ways.provider;
    $("sign-in-form").hidden = !ways.admin_key;
    $("key-note").hidden = !ways.admin_key;
    $("no-sign-in").hidden = Boolean(ways.provider || ways.admin_key);
    $("sso").addEventListener("click", () => sessionStorage.setItem(NEXT_STORAGE, location.hash));
    if (known && known.signed_in && typeof known.csrf === "string") {
      session = { csrf: known.csrf, subject: String(known.subject) };
      const next = sessionStorage.getItem(NEXT_STORAGE);
      sessionStorage.removeItem(NEXT_STORAGE);
      if (next && /^#\/(cards|adapters|upstreams|overview|passkeys)([/?][\w\-.:=&%/]*)?$/.test(next) && !location.hash.startsWith("#/")) {
        history.replaceState(null, "", location.pathname + next);
      }
    }
    const stored = ways.admin_key ? sessionStorage.getItem(KEY_STORAGE) : null;
    adminKey = !session && stored && KEY_SHAPE.test(stored) ? stored : null;
    const linkProblem = ways.admin_key ? takeKeyFromFragment() : null;
    $("sign-in-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const input = $("key-input");
      const key = input.value.trim();
      input.value = "";
      if (!KEY_SHAPE.test(key)) {
        showNotice("error", "That does not look like a key: paste the whole csk_admin_… value.");
        return;
      }
      useKey(key);
      if (!location.hash.startsWith("#/")) history.replaceState(null, "", location.pathname + "#/cards");
      route();
    });
    $("sign-out").addEventListener("click", () => signOut(null));
    window.addEventListener("hashchange", () => navigate(takeKeyFromFragment()));
    navigate(linkProblem);
  }

  function navigate(linkProblem) {
    route().then(() => {
      if (linkProblem) showNotice("warn", linkProblem);
    });
  }

  // -- passkeys --------------------------------------------------------------------------------------
  //
  // WebAuthn through the browser's own JSON forms of its options and answers; the gateway verifies every
  // answer with a WebAuthn library, and user verification is required at registration and at approval.

  async function passkeysView() {
    clearNotice();
    const body = el("div", { class: "loading" }, "Loading…");
    const token = startView(el("h2", null, "Passkeys"), body);
    const res = await api("GET", "passkeys");
    if (token !== renderToken) return;
    if (res.status !== 200) {
      body.replaceWith(notice("error", errorText(res, "passkeys"), problemsOf(res)));
      return;
    }
    const name = el("input", { type: "text", id: "passkey-name", maxlength: 64, required: true,
      placeholder: "a name for it (laptop, security key)" });
    const add = el("form", { id: "passkey-add", onsubmit: guarded(async (event) => {
      event.preventDefault();
      const done = await registerPasskey(name.value.trim());
      await passkeysView();
      showNotice(done.ok ? "ok" : "error", done.text);
    }) }, el("h3", null, "Add a passkey"),
    el("p", null, "Approvals of the cards that need it are signed with your passkey, over exactly the card you see."),
    name, el("button", { type: "submit", id: "passkey-add-button", class: "primary" }, "Add a passkey"));
    const rows = res.body.passkeys.map((p) => el("li", { "data-credential": p.credential_id },
      el("strong", null, p.name), " ", mono(p.credential_id.slice(0, 12) + "…"), " counter ", String(p.sign_count), " ",
      el("button", { type: "button", class: "quiet", onclick: guarded(async () => {
        if (!window.confirm("Remove this passkey?")) return;
        const gone = await api("DELETE", "passkeys/" + encodeURIComponent(p.credential_id));
        await passkeysView();
        if (gone.status !== 200) showNotice("error", errorText(gone, "passkey"));
      }) }, "Remove")));
    body.replaceWith(el("div", null,
      rows.length ? el("ul", { id: "passkey-list" }, rows) : el("p", { class: "empty", id: "passkey-list" }, "No passkey yet."),
      add));
  }

  async function registerPasskey(name) {
    if (!name) return { ok: false, text: "Give the passkey a name." };
    const started = await api("POST", "passkeys/registration", {});
    if (started.status !== 200) return { ok: false, text: errorText(started, "passkey") };
    const options = PublicKeyCredential.parseCreationOptionsFromJSON(started.body.options);
    const credential = await navigator.credentials.create({ publicKey: options });
    const done = await api("POST", "passkeys", { name, credential: credential.toJSON() });
    return done.status === 200 ? { ok: true, text: done.body.message } : { ok: false, text: errorText(done, "passkey") };
  }

  // The approver's assertion over this card as shown (its id, version, args_hash); null when they have no
  // passkey (the gateway then says whether the card needs one), false when the challenge was refused.
  async function signApproval(card) {
    if (!session) return null;
    const challenge = await api("POST", "passkeys/challenge",
      { card_id: card.card_id, version: card.version, args_hash: card.args_hash, decision: "approve" });
    if (challenge.status === 403) return null;
    if (challenge.status !== 200) {
      showNotice("error", errorText(challenge, "passkey"));
      return false;
    }
    const options = PublicKeyCredential.parseRequestOptionsFromJSON(challenge.body.options);
    const assertion = await navigator.credentials.get({ publicKey: options });
    return assertion.toJSON();
  }

  start();
})();
