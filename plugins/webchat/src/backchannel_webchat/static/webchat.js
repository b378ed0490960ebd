// backchannel web chat page. Plain JavaScript, no build step, no dependencies.
//
// Every message is rendered with textContent (never innerHTML), keyed by its
// transcript seq, so a reload, a reconnect or a push that races the
// transcript never shows a message twice.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const log = $("log");
  const form = $("composer");
  const input = $("text");
  const sendButton = $("send");
  const statusEl = $("status");
  const typingEl = $("typing");
  const errorEl = $("error");
  const emptyEl = $("empty");
  const counter = $("counter");
  const scroller = document.querySelector(".conversation");

  const KEY_VISITOR = "backchannel.webchat.visitor";
  const KEY_NAME = "backchannel.webchat.name";
  const KEY_TAB = "backchannel.webchat.conversation";
  const KEY_PENDING = "backchannel.webchat.pending";
  // the conversation this tab shows (sessionStorage: this tab's, across its reloads)
  const KEY_SHOWN = "backchannel.webchat.shown";
  // a conversation id as the server takes it (the hello's "conversation")
  const SAFE_ID = /^[A-Za-z0-9_-]{1,64}$/;

  let maxChars = Number(input.getAttribute("maxlength")) || 4000;
  let agentName = "Agent";
  let socket = null;
  // the server of this socket takes a message's "conversation" (its welcome says so)
  let takesConversation = false;
  let attempts = 0;
  let reconnectTimer = null;
  // the server closed the socket after its idle timeout: reconnect when the visitor is back
  let paused = false;
  let typingTimer = null;
  const bySeq = new Map();
  const byId = new Map();
  const byClient = new Map();

  // identity ----------------------------------------------------------------
  function randomId(bytes) {
    const data = new Uint8Array(bytes);
    crypto.getRandomValues(data);
    return Array.from(data, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function remembered(storage, key, make) {
    let value = null;
    try { value = storage.getItem(key); } catch (e) { /* storage disabled */ }
    if (!value) {
      value = make();
      try { storage.setItem(key, value); } catch (e) { /* keep it for this page only */ }
    }
    return value;
  }

  // a ?name= link names the visitor on the page it opens; it is kept for later visits only
  // once the visitor sends a message there (a link someone else sent cannot rename you)
  const params = new URLSearchParams(location.search);
  const linkName = (params.get("name") || "").slice(0, 64);
  const visitor = remembered(localStorage, KEY_VISITOR, () => randomId(16));

  // messages waiting for the server's ack survive a reload of this tab (sessionStorage),
  // each with the conversation it was written in: it is resent there and nowhere else (the
  // server recognises a resend by its client_id within one conversation only; resent into
  // another, it would be stored, and answered, twice). That holds after "New chat" too: the
  // page resends it, with its conversation, over the socket of the conversation shown
  function loadPending() {
    let items = [];
    try { items = JSON.parse(sessionStorage.getItem(KEY_PENDING) || "[]"); } catch (e) { /* none */ }
    if (!Array.isArray(items)) return [];
    return items.filter((item) => item && typeof item.client_id === "string" && typeof item.text === "string");
  }
  const placed = (item) => typeof item.conversation === "string" && SAFE_ID.test(item.conversation);
  const saved = loadPending();
  // what this tab showed before the reload (a page of an earlier version did not say: it
  // kept only the unacked messages of the conversation it showed)
  let before = null;
  try { before = sessionStorage.getItem(KEY_SHOWN); } catch (e) { /* storage disabled */ }
  if (!(before && SAFE_ID.test(before))) {
    const first = saved.find(placed);
    before = first ? first.conversation : null;
  }

  // the conversation is the browser's, not the tab's: every tab and reload of this browser
  // shows the same one until "New chat" starts another (open tabs follow it too). A tab
  // reloaded while it still holds unacked messages of the conversation it showed opens that
  // one instead, even if another tab started a new one meanwhile: they are resent there, and
  // the visitor sees where they went (its next reload, once they are acked, follows the
  // browser's again). Those of a conversation this tab left by its own "New chat" do not
  // hold it there: they are resent into theirs all the same, out of sight
  const browserTab = remembered(localStorage, KEY_TAB, () => randomId(8));
  let tab = before && saved.some((item) => item.conversation === before) ? before : browserTab;
  rememberShown();
  // unacked messages, of any conversation: each resent into its own on every (re)connect
  // until acked (those of the conversation shown are also shown, as "sending…")
  let pending = saved.filter(placed);
  // unacked messages of no known conversation (saved by an earlier version of this page,
  // which did not record theirs): never resent blindly, since they may be stored in another
  // conversation already. Settled by the first transcript (see settleUnplaced)
  let unplaced = saved.filter((item) => !placed(item));

  function rememberShown() {
    try { sessionStorage.setItem(KEY_SHOWN, tab); } catch (e) { /* ignore */ }
  }

  // unacked messages of the conversation shown (they keep this tab in it, see "storage")
  function pendingHere() {
    return pending.some((item) => item.conversation === tab);
  }

  function visitorName() {
    if (linkName) return linkName;
    try { return localStorage.getItem(KEY_NAME) || ""; } catch (e) { return ""; }
  }

  function keepLinkName() {
    if (!linkName) return;
    try { localStorage.setItem(KEY_NAME, linkName); } catch (e) { /* ignore */ }
  }

  function savePending() {
    try {
      sessionStorage.setItem(KEY_PENDING, JSON.stringify(pending.concat(unplaced)));
    } catch (e) { /* ignore */ }
  }

  // rendering ---------------------------------------------------------------
  function formatTime(seconds) {
    const date = seconds ? new Date(seconds * 1000) : new Date();
    return date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  }

  function findBubble(frame) {
    return (frame.seq != null && bySeq.get(frame.seq)) ||
      (frame.client_id && byClient.get(frame.client_id)) ||
      (frame.message_id && byId.get(frame.message_id)) ||
      (frame.id && byId.get(frame.id)) || null;
  }

  function createBubble(frame) {
    const li = document.createElement("li");
    li.className = "msg " + (frame.role === "visitor" ? "visitor" : "agent");
    const meta = document.createElement("div");
    meta.className = "meta";
    const who = document.createElement("span");
    who.className = "who";
    const time = document.createElement("time");
    const state = document.createElement("span");
    state.className = "state";
    meta.append(who, time, state);
    const body = document.createElement("div");
    body.className = "body";
    li.append(meta, body);
    li.parts = [];
    return li;
  }

  function setState(li, text, failed) {
    const state = li.querySelector(".state");
    state.textContent = text || "";
    state.classList.toggle("failed", Boolean(failed));
    li.classList.toggle("failed", Boolean(failed));
    li.classList.toggle("pending", !failed && Boolean(text));
  }

  function place(li, seq) {
    if (seq == null) {
      log.append(li);
      return;
    }
    li.dataset.seq = String(seq);
    for (const other of log.children) {
      if (other === li) continue;
      const otherSeq = other.dataset.seq ? Number(other.dataset.seq) : Infinity;
      if (otherSeq > seq) {
        if (li.nextSibling !== other) log.insertBefore(li, other);
        return;
      }
    }
    if (log.lastElementChild !== li) log.append(li);
  }

  function render(frame) {
    let li = findBubble(frame);
    const isNew = !li;
    if (isNew) li = createBubble(frame);
    const who = frame.role === "visitor" ? "You" : (frame.sender || agentName);
    li.querySelector(".who").textContent = who;
    const time = li.querySelector("time");
    time.textContent = formatTime(frame.sent_at);
    if (frame.sent_at) time.dateTime = new Date(frame.sent_at * 1000).toISOString();
    const body = li.querySelector(".body");
    if (frame.parts > 1 && !li.complete) {
      li.parts[frame.part] = frame.text;
      body.textContent = li.parts.filter((p) => p != null).join("\n");
    } else if (frame.text != null) {
      body.textContent = frame.text;
      if (frame.parts == null && frame.seq != null) li.complete = true;
    }
    if (frame.reply_to && !li.querySelector(".quote")) {
      const target = byId.get(frame.reply_to) || byClient.get(frame.reply_to);
      if (target) {
        const quote = document.createElement("div");
        quote.className = "quote";
        const text = target.querySelector(".body").textContent;
        quote.textContent = "↪ " + (text.length > 80 ? text.slice(0, 80) + "…" : text);
        li.insertBefore(quote, body);
      }
    }
    if (frame.edited) markEdited(li);
    if (frame.status === "failed") setState(li, "not delivered", true);
    else if (frame.status === "uncertain") setState(li, "may not have been delivered", true);
    else if (frame.status === "sending") setState(li, "sending…", false);
    else if (frame.seq != null) setState(li, "", false);
    if (frame.seq != null) bySeq.set(frame.seq, li);
    if (frame.id) byId.set(frame.id, li);
    if (frame.message_id) byId.set(frame.message_id, li);
    if (frame.client_id) byClient.set(frame.client_id, li);
    place(li, frame.seq);
    emptyEl.hidden = log.children.length > 0;
    return isNew;
  }

  function markEdited(li) {
    const meta = li.querySelector(".meta");
    if (!meta.querySelector(".edited")) {
      const edited = document.createElement("span");
      edited.className = "edited";
      edited.textContent = "edited";
      meta.append(edited);
    }
  }

  function scrollToEnd() {
    scroller.scrollTop = scroller.scrollHeight;
  }

  function showError(text, code) {
    errorEl.textContent = text || "";
    errorEl.dataset.code = text ? code || "" : "";
  }

  function setStatus(state, text) {
    statusEl.dataset.state = state;
    statusEl.textContent = text;
  }

  // connection --------------------------------------------------------------
  function socketUrl() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const dir = location.pathname.replace(/[^/]*$/, "");
    return scheme + location.host + dir + "ws";
  }

  function connect() {
    clearTimeout(reconnectTimer);
    paused = false;
    takesConversation = false;
    setStatus("connecting", attempts ? "Reconnecting…" : "Connecting…");
    const ws = new WebSocket(socketUrl());
    socket = ws;
    ws.addEventListener("open", () => {
      ws.send(JSON.stringify({ type: "hello", visitor, conversation: tab, name: visitorName() }));
    });
    ws.addEventListener("message", (event) => {
      let frame;
      try { frame = JSON.parse(event.data); } catch (e) { return; }
      if (ws === socket) handle(ws, frame);
    });
    ws.addEventListener("close", (event) => {
      if (ws !== socket) return;
      socket = null;
      sendButton.disabled = false;
      if (event.reason === "idle" && !pending.length) {
        // nothing sent for a long while: stay away until the visitor is back (resume()); a
        // message still unacknowledged (sent as the server closed) reconnects at once below
        paused = true;
        hideTyping();
        setStatus("paused", "Paused");
        return;
      }
      setStatus("offline", "Offline — reconnecting…");
      attempts += 1;
      const slow = event.reason === "too_many_tabs" || event.reason === "busy" ? 30000 : 0;
      const delay = slow || Math.min(10000, 400 * 2 ** Math.min(attempts, 5)) * (0.75 + Math.random() / 2);
      reconnectTimer = setTimeout(connect, delay);
    });
  }

  // the visitor is back (a key, a click, a touch, the tab shown again): reconnect a paused page
  function resume() {
    if (paused && !document.hidden) connect();
  }
  for (const name of ["keydown", "pointerdown", "pointermove", "touchstart", "wheel", "focus"]) {
    window.addEventListener(name, resume, { passive: true });
  }
  document.addEventListener("visibilitychange", resume);

  function send(frame) {
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify(frame));
      return true;
    }
    return false;
  }

  // (re)send an unacked message: only ever into the conversation it was written in. One of
  // another conversation goes only to a server that takes a message's conversation (an
  // older one would store it in the conversation shown); it waits for the next connect
  function resend(item) {
    if (item.conversation !== tab && !takesConversation) return;
    send({ type: "message", client_id: item.client_id, text: item.text, conversation: item.conversation });
  }

  // the first transcript settles messages of an unknown conversation (see `unplaced`): one
  // this conversation holds is done (shown above); any other is put back in the message box,
  // with a line saying why, for the visitor to send again: the page does not resend it
  function settleUnplaced() {
    if (!unplaced.length) return;
    const offered = unplaced.filter((item) => !byClient.has(item.client_id));
    unplaced = [];
    savePending();
    if (!offered.length) return;
    if (!input.value.trim()) {
      input.value = offered.map((item) => item.text).join("\n\n");
      updateCounter();
      autosize();
    }
    showError(
      (offered.length > 1 ? "Messages" : "A message") + " you wrote before this page was updated" +
      " could not be confirmed and " + (offered.length > 1 ? "are" : "is") + " not in this" +
      " conversation. " + (offered.length > 1 ? "They are" : "It is") + " back in the message" +
      " box: send again to post " + (offered.length > 1 ? "them" : "it") + " here.",
      "unplaced"
    );
  }

  function handle(ws, frame) {
    switch (frame.type) {
      case "welcome":
        attempts = 0;
        agentName = frame.agent || agentName;
        takesConversation = frame.message_conversation === true;
        if (frame.max_message_chars) {
          maxChars = frame.max_message_chars;
          input.maxLength = maxChars;
        }
        setStatus("online", "Online");
        showError("");
        break;
      case "transcript":
        log.setAttribute("aria-busy", "true");
        for (const message of frame.messages || []) render(message);
        settleUnplaced();
        for (const item of pending) {
          if (item.conversation === tab && !byClient.has(item.client_id)) {
            render({ client_id: item.client_id, role: "visitor", text: item.text, status: "sending" });
          }
          resend(item);
        }
        log.setAttribute("aria-busy", "false");
        emptyEl.hidden = log.children.length > 0;
        scrollToEnd();
        break;
      case "ack": {
        pending = pending.filter((item) => item.client_id !== frame.client_id);
        savePending();
        const li = byClient.get(frame.client_id);
        if (li && frame.seq != null) render({ client_id: frame.client_id, seq: frame.seq, role: "visitor" });
        break;
      }
      case "message":
        if (frame.role === "agent") {
          hideTyping();
          if (errorEl.dataset.code === "agent_failed") showError("");
        }
        render(frame);
        if (frame.delivery) send({ type: "received", delivery: frame.delivery });
        scrollToEnd();
        break;
      case "edit": {
        const li = byId.get(frame.id);
        if (li) {
          li.querySelector(".body").textContent = frame.text;
          markEdited(li);
        }
        if (frame.delivery) send({ type: "received", delivery: frame.delivery });
        break;
      }
      case "typing":
        showTyping(frame.sender || agentName);
        break;
      case "error":
        handleError(frame);
        break;
      default:
        break;
    }
  }

  function handleError(frame) {
    const li = frame.client_id ? byClient.get(frame.client_id) : null;
    if (frame.code === "agent_failed") {
      hideTyping();
      showError(frame.message, frame.code);
      return;
    }
    if (frame.code === "rate_limited" && frame.client_id) {
      const wait = Math.max(1, Number(frame.retry_after) || 3);
      if (li) setState(li, "waiting " + Math.ceil(wait) + " s…", false);
      showError("You are sending quickly; your message will go out in " + Math.ceil(wait) + " s.");
      setTimeout(() => {
        const item = pending.find((p) => p.client_id === frame.client_id);
        if (item) resend(item);
      }, wait * 1000);
      return;
    }
    if (frame.code === "unavailable" && frame.client_id) {
      showError(frame.message);
      setTimeout(() => {
        const item = pending.find((p) => p.client_id === frame.client_id);
        if (item) resend(item);
      }, 3000);
      return;
    }
    if (frame.client_id) {
      pending = pending.filter((item) => item.client_id !== frame.client_id);
      savePending();
      if (li) setState(li, "not sent", true);
    }
    showError(frame.message || "Something went wrong.");
  }

  function showTyping(name) {
    const text = name + " is typing…";
    // set only on change, so screen readers announce it once, not every few seconds
    if (typingEl.textContent !== text) typingEl.textContent = text;
    clearTimeout(typingTimer);
    typingTimer = setTimeout(hideTyping, 6000);
  }

  function hideTyping() {
    clearTimeout(typingTimer);
    typingEl.textContent = "";
  }

  // composing ---------------------------------------------------------------
  function updateCounter() {
    const length = input.value.length;
    counter.textContent = length > maxChars * 0.8 ? length + " / " + maxChars : "";
    counter.classList.toggle("over", length > maxChars);
  }

  function autosize() {
    input.style.height = "auto";
    input.style.height = Math.min(input.scrollHeight + 2, 192) + "px";
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = input.value;
    if (!text.trim()) return;
    if (text.length > maxChars) {
      showError("Your message has " + text.length + " characters; at most " + maxChars + " are allowed.");
      return;
    }
    showError("");
    keepLinkName();
    const item = { client_id: randomId(12), text, conversation: tab };
    pending.push(item);
    savePending();
    render({ client_id: item.client_id, role: "visitor", text, status: "sending" });
    resend(item);
    resume();  // a paused page sends it once it is back (the transcript resends pending)
    input.value = "";
    updateCounter();
    autosize();
    scrollToEnd();
    input.focus();
  });

  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  input.addEventListener("input", () => { updateCounter(); autosize(); });

  // show conversation `next` from now on (a "New chat" here, or one in another tab); the
  // unacked messages of the one left stay pending: the next connect resends them into it
  function switchTo(next) {
    tab = next;
    rememberShown();
    bySeq.clear(); byId.clear(); byClient.clear();
    log.replaceChildren();
    emptyEl.hidden = false;
    hideTyping();
    attempts = 0;
    if (socket) {
      const old = socket;
      socket = null;
      old.close(1000, "new chat");
    }
    connect();
  }

  $("new-chat").addEventListener("click", () => {
    const next = randomId(8);
    try { localStorage.setItem(KEY_TAB, next); } catch (e) { /* ignore */ }
    switchTo(next);
    input.focus();
  });

  // "New chat" in another tab of this browser: follow it, unless this tab still holds
  // messages of the conversation shown that the server has not acked (a reload meanwhile
  // reopens it to resend them; a reload after they went out follows it then)
  window.addEventListener("storage", (event) => {
    if (event.key === KEY_TAB && event.newValue && event.newValue !== tab &&
        !pendingHere() && !unplaced.length) {
      switchTo(event.newValue);
    }
  });

  connect();
  input.focus();
})();
