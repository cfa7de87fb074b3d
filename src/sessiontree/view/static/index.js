/* sessiontree serve, the front page: the sessions, and the inbox of pending pauses of
 * every session (with decision buttons when the server allows them). Polls the server
 * and redraws both lists. */
(function () {
  var h = ST.h;
  var CONFIG = ST.readJSON("st-config") || {};
  var data = ST.readJSON("st-data");
  var app = document.getElementById("app");
  var named = window.STDecide && STDecide.named;  // --deciders: who decides is who the token says
  var byInput = named
    ? h("input", { id: "decider-token", type: "password", value: STDecide.deciderToken(), placeholder: "your decider token",
        onchange: function () { sessionStorage.setItem("st-decider", byInput.value); } })
    : h("input", { id: "by", type: "text", value: window.STDecide ? STDecide.by() : "", placeholder: "your name",
        onchange: function () { sessionStorage.setItem("st-by", byInput.value || "web"); } });
  var inboxEl = h("section", { id: "inbox" }), sessionsEl = h("section", { id: "sessions" });
  var hitsEl = h("section", { id: "hits" });
  var searchInput = h("input", { id: "search-all", type: "search", placeholder: "search every session",
    onkeydown: function (e) { if (e.key === "Enter") search(searchInput.value); } });
  app.appendChild(h("header", {}, h("h1", { text: "sessiontree" }), searchInput, h("span", { class: "spacer" }),
    window.STDecide ? h("label", {}, named ? "decider token " : "deciding as ", byInput) : h("span", { class: "muted", text: "read-only (start with --allow-decide to decide here)" })));
  app.appendChild(hitsEl);
  app.appendChild(h("div", { class: "index" }, inboxEl, sessionsEl));

  // Search across sessions: each hit links to its node, opened on its branch by the view.
  function marked(snippet) {
    var parts = String(snippet).split(/[«»]/), out = h("span", { class: "snippet" });
    parts.forEach(function (part, i) { out.appendChild(i % 2 ? h("mark", { text: part }) : document.createTextNode(part)); });
    return out;
  }
  function search(query) {
    hitsEl.textContent = "";
    if (!query.trim()) return;
    fetch(CONFIG.api.search + "?q=" + encodeURIComponent(query), { cache: "no-store" })
      .then(function (r) { return r.json().then(function (body) { return { ok: r.ok, body: body }; }); })
      .then(function (res) {
        if (!res.ok) { hitsEl.appendChild(h("p", { class: "error", text: res.body.error || "search failed" })); return; }
        hitsEl.appendChild(h("h2", { text: "Search: " + res.body.length + " hit" + (res.body.length === 1 ? "" : "s") }));
        res.body.forEach(function (hit) {
          var refs = hit.branches.concat(hit.checkpoints.map(function (c) { return "[" + c + "]"; })).join(", ");
          hitsEl.appendChild(h("div", { class: "hit", "data-node": hit.node },
            h("a", { href: hit.href, text: (hit.title || hit.session) + " · " + hit.short }), "  ",
            h("span", { class: "muted", text: hit.kind + (refs ? " · " + refs : "") }), h("div", {}, marked(hit.snippet))));
        });
      }).catch(function () { hitsEl.appendChild(h("p", { class: "error", text: "the server is away" })); });
  }

  function drawInbox(items) {
    inboxEl.textContent = "";
    inboxEl.appendChild(h("h2", { text: "Inbox: " + items.length + " pending pause" + (items.length === 1 ? "" : "s") }));
    if (!items.length) inboxEl.appendChild(h("p", { class: "muted empty", text: "Nothing is waiting for a human." }));
    items.forEach(function (item) {
      var calls = h("ul");
      (item.calls || []).forEach(function (c) {
        calls.appendChild(h("li", {}, h("strong", { text: c.name || "?" }), " ", h("code", { text: ST.oneLine(ST.args(c.arguments), 200) }), h("span", { class: "sid", text: "  [" + c.id + "]" })));
      });
      inboxEl.appendChild(h("div", { class: "inbox-item", "data-pause": item.pause },
        h("div", {}, h("a", { href: "/s/" + encodeURIComponent(item.session) + "#node=" + encodeURIComponent(item.pause), text: item.title || item.session }),
          "  ", h("span", { class: "sid", text: item.short }), "  ", h("span", { class: "time", text: ST.time(item.at) })),
        item.reason ? h("div", { text: String(item.reason) }) : null, calls,
        item.state === "expired" ? h("div", { class: "expired", text: "expired at " + ST.time(item.expires_at) + ": it can no longer be decided" })
          : item.expires_at ? h("div", { class: "muted", text: "expires " + ST.time(item.expires_at) }) : null,
        item.state !== "expired" && window.STDecide ? STDecide.controls({ pause: item.pause, calls: item.calls || [] }, refresh) : null));
    });
  }
  function drawSessions(list) {
    sessionsEl.textContent = "";
    sessionsEl.appendChild(h("h2", { text: "Sessions (" + list.length + ")" }));
    var table = h("table", {}, h("tr", {}, h("th", { text: "title" }), h("th", { text: "id" }), h("th", { text: "nodes" }),
      h("th", { text: "pending" }), h("th", { text: "last activity" })));
    list.forEach(function (s) {
      table.appendChild(h("tr", {}, h("td", {}, h("a", { href: "/s/" + encodeURIComponent(s.id), text: s.title || "(untitled)" })),
        h("td", { class: "sid", text: s.id }), h("td", { text: String(s.nodes) }), h("td", { text: s.pending ? String(s.pending) : "" }),
        h("td", { class: "time", text: ST.time(s.last_activity) })));
    });
    sessionsEl.appendChild(table);
  }
  var lastInbox = null, lastSessions = null;
  function refresh() {
    function answer(r) { if (!r.ok) throw new Error(String(r.status)); return r.json(); }  // an error is no list
    Promise.all([fetch(CONFIG.api.inbox, { cache: "no-store" }).then(answer),
                 fetch(CONFIG.api.sessions, { cache: "no-store" }).then(answer)])
      .then(function (both) {
        var inboxText = JSON.stringify(both[0]), sessionsText = JSON.stringify(both[1]);
        // redraw only on change, so a half-typed reason or edit is not wiped by a poll
        if (inboxText !== lastInbox) { lastInbox = inboxText; drawInbox(both[0]); }
        if (sessionsText !== lastSessions) { lastSessions = sessionsText; drawSessions(both[1]); }
      }).catch(function () { /* the server is away: try again at the next tick */ });
  }
  lastInbox = JSON.stringify(data.inbox); lastSessions = JSON.stringify(data.sessions);
  drawInbox(data.inbox);
  drawSessions(data.sessions);
  setInterval(refresh, CONFIG.interval || 1500);
  document.body.dataset.ready = "1";
})();
