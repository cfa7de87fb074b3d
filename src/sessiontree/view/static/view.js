/* sessiontree view: one session tree (left) and the path to the selected node (right).
 *
 * Contract: reads the session from the JSON element #st-data and its options from
 * #st-config; builds the page with ST.h (textContent only). The tree is a git-log
 * layout: a chain of single children stays in one column and only a fork indents;
 * forks with many children start folded. Only the rows in view exist in the DOM
 * (fixed row height, rows placed by index), so 10,000 nodes open at once.
 * Keyboard: j/k along the path, [/] across siblings, n/p next/previous fork, / search.
 * Deep links: #node=<id or unique prefix>. With config.live the page polls the
 * server for a new version of the session (against config.live.built, the version it
 * was built from) and redraws, keeping the selection; it retries while the server is
 * away or failing (5xx), and stops, saying why, when the session is gone (404) or the
 * server refuses (another 4xx). */
(function () {
  var h = ST.h;
  var CONFIG = ST.readJSON("st-config") || {};
  var ROW = 24;          // px, every tree row: rows are placed by index, never measured
  var OVERSCAN = 15;     // rows drawn above and below the visible ones
  var FOLD_AT = 5;       // forks with more children than this start folded
  var PATH_CARDS = 120;  // path cards drawn before "show earlier"
  var MAX_INDENT = 16;   // fork levels drawn; deeper ones stay in the last column

  var D, N, byId, roots, headsAt, cpsAt, pending, expired, onCurrent, rows, rowOf, leaves;
  var state = {
    selected: -1, pathSet: new Set(), trail: -1, filter: "all", folds: new Map(), query: "", matches: [], matchSet: new Set(),
    matchPos: -1, current: null, compare: null, showAll: false
  };
  var ui = {};

  // -- the data ---------------------------------------------------------------

  // nolat counts the calls whose latency was not recorded (imports): they add nothing to lat
  function metrics() { return { calls: 0, tin: 0, tout: 0, lat: 0, nolat: 0, cost: 0, unpriced: false }; }
  function addMetrics(into, m) {
    into.calls += m.calls; into.tin += m.tin; into.tout += m.tout; into.lat += m.lat; into.nolat += m.nolat; into.cost += m.cost;
    into.unpriced = into.unpriced || m.unpriced;
  }
  function priced() { return D.prices && Object.keys(D.prices).length > 0; }

  function load(data) {
    D = data;
    N = []; byId = new Map(); roots = []; headsAt = new Map(); cpsAt = new Map();
    pending = new Set(D.pending);
    expired = new Set(D.expired || []);
    D.nodes.forEach(function (raw, i) {
      N.push({ i: i, id: raw.id, parentId: raw.parent, parent: -1, kind: raw.kind, at: raw.at, run: raw.run,
               payload: raw.payload || {}, kids: [], depth: 0, own: null, sub: metrics(), text: null });
      byId.set(raw.id, i);
    });
    N.forEach(function (n) {
      var p = n.parentId === null ? undefined : byId.get(n.parentId);
      if (p === undefined) roots.push(n.i); else { n.parent = p; N[p].kids.push(n.i); }
    });
    var seenRuns = new Set();
    var order = dfsOrder();
    order.forEach(function (i) {
      var n = N[i];
      n.depth = n.parent < 0 ? 0 : N[n.parent].depth + 1;
      var run = n.run && D.runs[n.run];
      if (run && !seenRuns.has(n.run)) {  // a run counts once, on its first node
        seenRuns.add(n.run);
        var m = metrics();
        m.calls = 1; m.tin = run.input_tokens || 0; m.tout = run.output_tokens || 0; m.lat = run.latency_ms || 0;
        m.nolat = typeof run.latency_ms === "number" ? 0 : 1;
        var price = Object.prototype.hasOwnProperty.call(D.prices || {}, run.model) ? D.prices[run.model] : null;
        if (price) m.cost = (m.tin * (price.input || 0) + m.tout * (price.output || 0)) / 1e6;
        else m.unpriced = true;
        n.own = m;
      }
    });
    for (var k = order.length - 1; k >= 0; k--) {
      var n = N[order[k]];
      if (n.own) addMetrics(n.sub, n.own);
      if (n.parent >= 0) addMetrics(N[n.parent].sub, n.sub);
    }
    D.branches.forEach(function (b) { listAt(headsAt, b.head).push(b.name); });
    D.checkpoints.forEach(function (c) { listAt(cpsAt, c.node).push(c.name); });
    leaves = N.filter(function (n) { return n.kids.length === 0; }).map(function (n) { return n.i; });
    if (!state.current || !D.branches.some(function (b) { return b.name === state.current; })) state.current = D.current;
    markCurrent();
  }
  function listAt(map, id) { if (!map.has(id)) map.set(id, []); return map.get(id); }
  function dfsOrder() {
    var out = [], stack = roots.slice().reverse();
    while (stack.length) {
      var i = stack.pop();
      out.push(i);
      for (var k = N[i].kids.length - 1; k >= 0; k--) stack.push(N[i].kids[k]);
    }
    return out;
  }
  function branchHead(name) {
    var b = D.branches.find(function (x) { return x.name === name; });
    return b && byId.has(b.head) ? byId.get(b.head) : -1;
  }
  function markCurrent() {
    onCurrent = new Set();
    for (var i = branchHead(state.current); i >= 0; i = N[i].parent) onCurrent.add(i);
  }
  function pathTo(i) { var out = []; for (; i >= 0; i = N[i].parent) out.push(i); return out.reverse(); }
  function isAncestor(a, b) {  // a is b or an ancestor of b
    if (a < 0 || b < 0) return false;
    while (b >= 0 && N[b].depth > N[a].depth) b = N[b].parent;
    return a === b;
  }
  function short(id) { return id.slice(0, D.short); }
  function pauseCalls(i) { return (N[i].payload.calls || []).filter(function (c) { return c && typeof c === "object"; }); }

  // -- what a node says, on one line ------------------------------------------

  function callText(call) {
    var f = (call && call.function) || call || {};
    return (f.name || "?") + "(" + ST.oneLine(ST.args(f.arguments !== undefined ? f.arguments : ""), 80) + ")";
  }
  function isToolTraffic(n) {
    if (n.kind === "tool_start") return true;
    if (n.kind !== "message") return false;
    var p = n.payload;
    return p.role === "tool" || (p.role === "assistant" && !!p.tool_calls && !ST.contentText(p.content).trim());
  }
  function label(n) {
    var p = n.payload;
    switch (n.kind) {
      case "message":
        var text = ST.contentText(p.content);
        if (p.role === "tool") return "tool " + (p.name || p.tool_call_id || "") + " → " + text;
        if (p.role === "assistant" && p.tool_calls && p.tool_calls.length)
          return (text ? text + "  " : "") + "→ " + p.tool_calls.map(callText).join("; ");
        return p.role + ": " + text;
      case "pause":
        return "paused: " + pauseCalls(n.i).map(function (c) { return (c.name || "?") + "(" + ST.oneLine(ST.args(c.arguments), 60) + ")"; }).join("; ");
      case "decision":
        var ds = p.decisions || {};
        return "decision: " + Object.keys(ds).map(function (k) { return ds[k].action; }).join(", ") + (p.by ? " by " + p.by : "");
      case "error":
        return "error: " + errorText(p);
      case "tool_start":
        return "running " + (p.calls || []).map(function (c) { return c.name; }).join(", ");
      case "score":
        return "score: " + p.scorer + " = " + p.value + (p.note ? " (" + p.note + ")" : "");
      default:
        var said = markerText(p);
        return n.kind + (said.tag ? " (" + said.tag + ")" : "") + ": " + (said.text || said.fields || "—");
    }
  }
  var MARKER_KEYS = ["source", "type", "subtype", "summary", "text", "content", "message"];
  function markerText(p) {
    // A note, summary or other marker as words: its text (a summary, a note's text or content,
    // an imported message's content), its type, and its other plain fields; never raw JSON.
    var body = [p.summary, p.text, p.content, p.message && typeof p.message === "object" ? p.message.content : p.message]
      .find(function (v) { return v !== undefined && v !== null && v !== ""; });
    var fields = Object.keys(p).filter(function (k) {
      var v = p[k];
      return MARKER_KEYS.indexOf(k) < 0 && v !== null && v !== undefined && typeof v !== "object";
    }).map(function (k) { return k + " " + p[k]; });
    return { tag: [p.type, p.subtype].filter(function (v) { return v && typeof v !== "object"; }).join(" · "),
             text: body === undefined ? "" : ST.contentText(body), fields: fields.join(", ") };
  }
  function asText(value) { return typeof value === "string" ? value : JSON.stringify(value); }
  function errorText(p) {  // "ProviderError: 429 too many requests", whatever the payload holds
    return [p.error, p.message].filter(function (x) { return x !== undefined && x !== null; }).map(asText).join(": ") || asText(p);
  }
  function searchText(n) {
    if (n.text === null) n.text = (n.id + " " + label(n) + " " + JSON.stringify(n.payload)).toLowerCase();
    return n.text;
  }
  function metricText(m, prefix) {
    if (!m || !m.calls) return "";
    var parts = [prefix + (m.calls > 1 || prefix ? m.calls + " call" + (m.calls > 1 ? "s" : "") + " · " : ""),
                 ST.num(m.tin) + "→" + ST.num(m.tout) + " tok", latencyText(m)];
    if (priced()) parts.push(m.unpriced ? "cost ?" : ST.money(m.cost));
    return parts[0] + parts.slice(1).join(" · ");
  }
  function latencyText(m) {  // "—" with no calls, never "0 ms" for a latency nobody recorded
    if (!m.calls) return "—";
    if (m.nolat === m.calls) return "latency unknown";
    return ST.ms(m.lat) + (m.nolat ? " + " + m.nolat + " unknown" : "");
  }
  function ownText(n) {
    if (!n.own) return "";
    var run = D.runs[n.run];
    return (run.model || "?") + " · " + metricText(n.own, "");
  }

  // -- the rows of the tree ---------------------------------------------------

  function visible(n) {
    switch (state.filter) {
      case "conversation": return n.kind === "message" && !isToolTraffic(n);
      case "notools": return !isToolTraffic(n);
      case "errors": return n.kind === "error";
      default: return true;
    }
  }
  function folded(i) {
    var n = N[i];
    if (n.kids.length < 2) return false;
    var v = state.folds.get(n.id);
    return v === undefined ? n.kids.length > FOLD_AT : v;
  }
  function mainChild(n) {
    for (var k = 0; k < n.kids.length; k++) if (onCurrent.has(n.kids[k])) return n.kids[k];
    return n.kids[0];
  }
  function buildRows() {
    rows = []; rowOf = new Map();
    var stack = [], opening = null, separators = 0;
    // Each root of a session of several opens under its own line ("root 2 of 3"), drawn
    // before the root's first shown row, so that it never reads as carrying on the last leaf.
    function add(row) {
      if (opening) { rows.push(opening); separators++; opening = null; }
      rows.push(row);
    }
    for (var r = roots.length - 1; r >= 0; r--) stack.push([roots[r], roots.length > 1 ? 1 : 0, r]);
    while (stack.length) {
      var top = stack.pop(), i = top[0], level = top[1], n = N[i];
      if (top.length > 2 && roots.length > 1) opening = { i: i, level: 0, root: top[2] + 1 };
      if (visible(n)) { rowOf.set(i, rows.length + (opening ? 1 : 0)); add({ i: i, level: level }); }
      if (!n.kids.length) continue;
      // git-log style: one child carries on in this column (the one on the current branch,
      // else the first); the others are drawn first, one step in, like merged side branches
      var main = mainChild(n);
      stack.push([main, level]);
      if (n.kids.length < 2) continue;
      if (folded(i)) { add({ i: i, level: level + 1, fold: true }); continue; }
      for (var k = n.kids.length - 1; k >= 0; k--) if (n.kids[k] !== main) stack.push([n.kids[k], level + 1]);
    }
    ui.inner.style.height = rows.length * ROW + "px";
    ui.count.textContent = rows.length - separators + " rows · " + N.length + " nodes";
  }

  function badges(i, into) {
    var n = N[i];
    (headsAt.get(n.id) || []).forEach(function (name) {
      into.push(h("span", { class: "badge branch" + (name === state.current ? " current" : ""), title: "branch head: " + name,
        text: (name === state.current ? "● " : "⎇ ") + name,
        onclick: function (e) { e.stopPropagation(); state.current = name; markCurrent(); buildRows(); select(i); } }));
    });
    (cpsAt.get(n.id) || []).forEach(function (name) {
      into.push(h("span", { class: "badge checkpoint", title: "checkpoint: " + name, text: "⚑ " + name }));
    });
    if (expired.has(n.id)) into.push(h("span", { class: "badge expired", text: "‖ expired" }));
    else if (pending.has(n.id)) into.push(h("span", { class: "badge pending", text: "‖ pending" }));
    return into;
  }
  function rowElement(r, index) {
    var n = N[r.i];
    var indent = Math.min(r.level, MAX_INDENT) * 14;  // deeper nesting keeps the last column
    var el = h("div", { class: "row", style: { top: index * ROW + "px", paddingLeft: 6 + indent + "px",
                                              backgroundSize: indent + "px 100%" } });
    if (r.root) {
      el.classList.add("root-row");
      el.textContent = "root " + r.root + " of " + roots.length;
      return el;
    }
    if (r.fold) {
      el.classList.add("fold-row");
      el.dataset.fold = n.id;
      ST.append(el, h("span", { class: "toggle", text: "▸" }),
        n.kids.length - 1 + " more branches folded · click to open");
      el.addEventListener("click", function () { state.folds.set(n.id, false); redraw(); });
      return el;
    }
    el.dataset.id = n.id;
    el.classList.add("kind-" + n.kind);
    if (n.kind === "message") el.classList.add("role-" + n.payload.role);
    if (r.i === state.selected) el.classList.add("selected");
    if (onCurrent.has(r.i)) el.classList.add("on-current");
    if (state.matchSet.has(r.i)) el.classList.add("match");
    if (state.pathSet.has(r.i) && r.i !== state.selected) el.classList.add("on-path");
    if (n.kids.length > 1) {
      var isFolded = folded(r.i);
      el.appendChild(h("span", { class: "toggle", title: (isFolded ? "open" : "fold") + " this fork",
        text: (isFolded ? "▸" : "▾") + n.kids.length,
        onclick: function (e) { e.stopPropagation(); state.folds.set(n.id, !isFolded); redraw(); } }));
    } else el.appendChild(h("span", { class: "toggle" }));  // keeps the ids in one column
    var m = n.kids.length > 1 ? metricText(n.sub, "Σ ") : ownText(n);
    ST.append(el, h("span", { class: "sid", text: short(n.id) }), badges(r.i, []),
      h("span", { class: "label", text: ST.oneLine(label(n), 160) }), m ? h("span", { class: "metrics", text: m }) : null);
    el.addEventListener("click", function () { select(r.i); });
    return el;
  }
  var pendingFrame = 0;
  function drawRows() {
    pendingFrame = 0;
    var top = ui.scroll.scrollTop, height = ui.scroll.clientHeight || 600;
    var first = Math.max(0, Math.floor(top / ROW) - OVERSCAN);
    var last = Math.min(rows.length, Math.ceil((top + height) / ROW) + OVERSCAN);
    var frag = document.createDocumentFragment();
    for (var k = first; k < last; k++) frag.appendChild(rowElement(rows[k], k));
    ui.inner.textContent = "";
    ui.inner.appendChild(frag);
  }
  function scheduleRows() { if (!pendingFrame) pendingFrame = requestAnimationFrame(drawRows); }
  function scrollToRow(i) {
    var r = rowOf.get(i);
    if (r === undefined) return;
    var top = r * ROW, view = ui.scroll.clientHeight || 600;
    if (top < ui.scroll.scrollTop || top + ROW > ui.scroll.scrollTop + view) ui.scroll.scrollTop = Math.max(0, top - view / 3);
  }
  function redraw() { buildRows(); drawRows(); }

  // -- selection and moves ----------------------------------------------------

  function select(i, keepTrail) {
    if (i < 0 || i >= N.length) return;
    state.selected = i;
    state.pathSet = new Set(pathTo(i));  // rows ask "am I on the path?" once per draw
    state.compare = null;
    if (!keepTrail && !isAncestor(i, state.trail)) state.trail = i;
    var opened = false;
    for (var a = N[i].parent; a >= 0; a = N[a].parent) {
      if (folded(a)) { state.folds.set(N[a].id, false); opened = true; }
    }
    if (opened) buildRows();
    var hash = "#node=" + N[i].id;
    if (location.hash !== hash) history.replaceState(null, "", hash);
    scrollToRow(i);
    drawRows();
    drawPath();
  }
  function towardTrail(i) {
    var n = N[i];
    if (!n.kids.length) return -1;
    if (state.trail >= 0 && state.trail !== i && isAncestor(i, state.trail)) {
      var t = state.trail;
      while (N[t].parent !== i) t = N[t].parent;
      return t;
    }
    var onBranch = n.kids.find(function (k) { return onCurrent.has(k); });
    return onBranch !== undefined ? onBranch : n.kids[0];
  }
  function siblings(i) { return N[i].parent < 0 ? roots : N[N[i].parent].kids; }
  function move(key) {
    var i = state.selected;
    if (i < 0) { if (N.length) select(roots[0]); return; }
    if (key === "j") { var c = towardTrail(i); if (c >= 0) select(c, true); }
    else if (key === "k") { if (N[i].parent >= 0) select(N[i].parent, true); }
    else if (key === "[" || key === "]") {
      var sibs = siblings(i), at = sibs.indexOf(i), to = sibs[at + (key === "]" ? 1 : -1)];
      if (to !== undefined) select(to);
    } else if (key === "n" || key === "p") nextFork(key === "n" ? 1 : -1);
  }
  function nextFork(step) {
    var from = rowOf.get(state.selected);
    if (from === undefined) from = step > 0 ? -1 : rows.length;
    for (var r = from + step; r >= 0 && r < rows.length; r += step) {
      if (!rows[r].fold && !rows[r].root && N[rows[r].i].kids.length > 1) { select(rows[r].i); return; }
    }
  }
  function headFor(i) {
    // the current branch when it runs through the node, else any branch that does, else a leaf
    var current = branchHead(state.current);
    if (current >= 0 && isAncestor(i, current)) return { i: current, name: state.current };
    for (var k = 0; k < D.branches.length; k++) {
      var b = branchHead(D.branches[k].name);
      if (b >= 0 && isAncestor(i, b)) return { i: b, name: D.branches[k].name };
    }
    while (N[i].kids.length) i = N[i].kids[0];
    return { i: i, name: null };
  }

  // -- the path pane ----------------------------------------------------------

  function details(summary, body, cls) {
    return h("details", { class: cls || "" }, h("summary", { text: summary }), h("pre", { text: body }));
  }
  function cardBody(n) {
    var p = n.payload, out = [];
    if (n.kind === "message") {
      var text = ST.contentText(p.content);
      if (p.role === "tool") {
        out.push(details("⚙ " + (p.name ? p.name + " " : "") + "result for " + (p.tool_call_id || "?") + ": " + ST.oneLine(text, 100), text, "tool"));
        return out;
      }
      if (text) out.push(h("div", { class: "text", text: text }));
      (p.tool_calls || []).forEach(function (call) {
        out.push(details("→ " + callText(call) + "  [" + call.id + "]", ST.pretty(call.function && call.function.arguments), "tool"));
      });
    } else if (n.kind === "pause") {
      if (p.reason) out.push(h("div", { class: "text", text: String(p.reason) }));
      pauseCalls(n.i).forEach(function (c) {
        out.push(details("‖ " + (c.name || "?") + "(" + ST.oneLine(ST.args(c.arguments), 80) + ")  [" + c.id + "]", ST.pretty(c.arguments), "tool"));
      });
      if (expired.has(n.id)) out.push(h("div", { class: "expired", text: "expired at " + ST.time(p.expires_at) + ": it can no longer be decided" }));
      else if (pending.has(n.id) && window.STDecide) out.push(STDecide.controls({ pause: n.id, calls: pauseCalls(n.i) }, poll));
    } else if (n.kind === "decision") {
      var names = Object.create(null);  // call ids are data: "__proto__" must stay a key
      if (n.parent >= 0) pauseCalls(n.parent).forEach(function (c) { names[c.id] = c.name; });
      out.push(h("div", { class: "decided", text: (p.reason === "expired" ? "expired, rejected by the system" : "decided by " + (p.by || "(nobody named)")) + " at " + ST.time(p.at || n.at) }));
      var ds = p.decisions || {};
      Object.keys(ds).forEach(function (id) {
        var d = ds[id], what = (names[id] || id) + " [" + id + "]: " + d.action;
        if (d.action === "reject") out.push(h("div", { class: "decision reject", text: what + (d.reason ? ": " + d.reason : "") }));
        else if (d.action === "edit") out.push(h("div", { class: "decision edit" }, what + ", arguments edited to", h("pre", { text: ST.pretty(d.arguments) })));
        else out.push(h("div", { class: "decision approve", text: what }));
      });
    } else if (n.kind === "error") {
      out.push(h("div", { class: "text", text: errorText(p) + (p.during ? " (during " + asText(p.during) + ")" : "") }));
      out.push(details("details", ST.pretty(p)));
    } else if (n.kind === "tool_start") {
      out.push(h("div", { class: "muted", text: "running " + (p.calls || []).map(function (c) { return c.name + " [" + c.id + "]"; }).join(", ") }));
    } else {
      var said = markerText(p);
      if (said.tag) out.push(h("div", { class: "muted", text: said.tag + (p.source ? " · from " + p.source : "") }));
      if (said.text) out.push(h("div", { class: "text", text: said.text }));
      if (said.fields) out.push(h("div", { class: "muted", text: said.fields }));
      if (!said.text && !said.fields) out.push(h("div", { class: "muted", text: "(nothing recorded)" }));
      out.push(details("payload", ST.pretty(p)));
    }
    return out;
  }
  function card(i) {
    var n = N[i];
    var who = n.kind === "message" ? n.payload.role : n.kind;
    var head = h("div", { class: "card-head" }, h("span", { class: "who", text: who }), h("span", { class: "sid", text: short(n.id) }),
      h("span", { class: "time", text: ST.time(n.at) }), badges(i, []));
    var own = ownText(n);
    if (own) head.appendChild(h("span", { class: "metrics", text: own }));
    var el = h("div", { class: "card kind-" + n.kind + (n.kind === "message" ? " role-" + n.payload.role : "") + (i === state.selected ? " selected" : "") },
      head, cardBody(n));
    el.dataset.id = n.id;
    head.addEventListener("click", function () { select(i, true); });
    return el;
  }
  function drawPath() {
    var pane = ui.path;
    pane.textContent = "";
    if (state.compare) { drawCompare(); return; }
    var i = state.selected;
    if (i < 0) { pane.appendChild(h("p", { class: "muted", text: "Select a node to read the path that leads to it." })); return; }
    var path = pathTo(i), target = headFor(i);
    var bar = h("div", { class: "path-bar" },
      h("strong", { text: "Path to " + short(N[i].id) }), h("span", { class: "muted", text: " · " + path.length + " nodes" }),
      target.i !== i ? h("button", { id: "to-head", onclick: function () { state.trail = target.i; select(target.i, true); },
        text: "⤓ back to the head" + (target.name ? " of " + target.name : "") }) : null,
      h("button", { id: "compare", onclick: function () { openCompare(i); }, text: "compare leaves…" }));
    pane.appendChild(bar);
    var shown = path;
    if (path.length > PATH_CARDS && !state.showAll) {
      shown = path.slice(path.length - PATH_CARDS);
      pane.appendChild(h("button", { class: "earlier", text: "show " + (path.length - PATH_CARDS) + " earlier nodes",
        onclick: function () { state.showAll = true; drawPath(); } }));
    }
    var frag = document.createDocumentFragment();
    shown.forEach(function (k) { frag.appendChild(card(k)); });
    pane.appendChild(frag);
    var n = N[i], below = [];
    if (n.kids.length) {
      below.push(h("div", { text: "continues in " + n.kids.length + (n.kids.length > 1 ? " branches" : " node") + ":" }));
      n.kids.slice(0, 20).forEach(function (k) {
        below.push(h("a", { href: "#node=" + N[k].id, class: "next", text: short(N[k].id) + "  " + ST.oneLine(label(N[k]), 90),
          onclick: function (e) { e.preventDefault(); select(k); } }));
      });
    }
    var sub = metricText(n.sub, "");
    pane.appendChild(h("div", { class: "subtree" }, h("div", { class: "subtree-metrics", text: "subtree: " + (sub || "no model calls") }), below));
    var sel = pane.querySelector(".card.selected");
    if (sel && sel.scrollIntoView) sel.scrollIntoView({ block: "nearest" });
  }

  // -- compare two leaves -----------------------------------------------------

  function leafChoices() {
    var seen = new Set(), out = [];
    D.branches.forEach(function (b) { var i = byId.get(b.head); if (i !== undefined && !seen.has(i)) { seen.add(i); out.push(i); } });
    leaves.forEach(function (i) { if (!seen.has(i)) { seen.add(i); out.push(i); } });
    return out;
  }
  function choiceLabel(i) {
    var names = headsAt.get(N[i].id) || [];
    return (names.length ? names.join(", ") + " · " : "") + short(N[i].id) + " · " + ST.oneLine(label(N[i]), 50);
  }
  function openCompare(i) {
    var choices = leafChoices(), a = headFor(i).i;
    var b = choices.find(function (k) { return k !== a; });
    state.compare = { a: a, b: b === undefined ? a : b };
    drawPath();
  }
  function commonAncestor(a, b) {
    while (a >= 0 && b >= 0 && a !== b) {
      if (N[a].depth >= N[b].depth) a = N[a].parent; else b = N[b].parent;
    }
    return a >= 0 && b >= 0 ? a : -1;
  }
  function summary(leaf, ancestor) {
    var added = pathTo(leaf).filter(function (k) { return ancestor < 0 || N[k].depth > N[ancestor].depth; });
    var m = metrics(), s = { added: added, steps: 0, tools: 0, errors: 0, pauses: 0, final: null, scores: {} };
    added.forEach(function (k) {
      var n = N[k], p = n.payload;
      if (n.own) addMetrics(m, n.own);
      if (n.kind === "error") s.errors++;
      if (n.kind === "pause") s.pauses++;
      if (n.kind === "score") { delete s.scores[p.scorer]; s.scores[p.scorer] = p.value; }  // the latest by each
      if (n.kind === "message" && p.role === "assistant") {
        s.steps++; s.tools += (p.tool_calls || []).length;
        if (!(p.tool_calls || []).length) s.final = ST.contentText(p.content);
      }
    });
    var path = pathTo(leaf), at = path.length - 1;
    while (at > 0 && N[path[at]].kind === "score") at--;  // a score judges the run; it is not what the run did
    var head = N[path[at]], hp = head.payload;
    s.status = pending.has(head.id) ? "paused" : head.kind === "error" ? "error"
      : head.kind === "message" && hp.role === "assistant" && !(hp.tool_calls || []).length ? "completed" : "in progress";
    s.m = m;
    return s;
  }
  function drawCompare() {
    var pane = ui.path, c = state.compare, choices = leafChoices();
    function picker(which) {
      var sel = h("select", { id: "compare-" + which, onchange: function () { c[which] = Number(sel.value); drawPath(); } });
      choices.forEach(function (k) { sel.appendChild(h("option", { value: k, text: choiceLabel(k), selected: k === c[which] })); });
      return sel;
    }
    pane.appendChild(h("div", { class: "path-bar" }, h("strong", { text: "Compare " }), picker("a"), " with ", picker("b"),
      h("button", { onclick: function () { state.compare = null; drawPath(); }, text: "close" })));
    var anc = commonAncestor(c.a, c.b), sa = summary(c.a, anc), sb = summary(c.b, anc);
    pane.appendChild(h("p", { class: "ancestor" }, "common ancestor: ",
      anc >= 0 ? h("a", { href: "#node=" + N[anc].id, text: short(N[anc].id) + "  " + ST.oneLine(label(N[anc]), 80),
        onclick: function (e) { e.preventDefault(); select(anc); } }) : "none (different roots)"));
    function line(name, f) { return h("tr", {}, h("th", { text: name }), h("td", { text: f(sa) }), h("td", { text: f(sb) })); }
    pane.appendChild(h("table", { class: "compare" },
      h("tr", {}, h("th"), h("th", { text: "A · " + short(N[c.a].id) }), h("th", { text: "B · " + short(N[c.b].id) })),
      line("status", function (s) { return s.status; }),
      line("final answer", function (s) { return s.final === null ? "—" : ST.oneLine(s.final, 200); }),
      line("nodes added", function (s) { return String(s.added.length); }),
      line("steps (model calls)", function (s) { return String(s.steps); }),
      line("tool calls", function (s) { return String(s.tools); }),
      line("tokens in → out", function (s) { return s.m.tin + " → " + s.m.tout; }),
      line("latency", function (s) { return latencyText(s.m); }),
      priced() ? line("cost", function (s) { return s.m.unpriced ? "?" : ST.money(s.m.cost); }) : null,
      line("errors", function (s) { return String(s.errors); }),
      line("pauses", function (s) { return String(s.pauses); }),
      line("scores", function (s) {
        var names = Object.keys(s.scores);
        return names.length ? names.map(function (k) { return k + " " + s.scores[k]; }).join(", ") : "—";
      })));
    [["A adds", sa], ["B adds", sb]].forEach(function (pair) {
      var list = h("ol", { class: "adds" });
      pair[1].added.slice(0, 200).forEach(function (k) {
        list.appendChild(h("li", {}, h("a", { href: "#node=" + N[k].id, text: short(N[k].id) + "  " + ST.oneLine(label(N[k]), 100),
          onclick: function (e) { e.preventDefault(); select(k); } })));
      });
      pane.appendChild(h("div", { class: "side" }, h("h3", { text: pair[0] + " (" + pair[1].added.length + ")" }), list));
    });
  }

  // -- search, filters, keyboard, links ---------------------------------------

  function search(q) {
    state.query = q.trim().toLowerCase();
    state.matches = [];
    if (state.query) {
      var order = dfsOrder();
      for (var k = 0; k < order.length; k++) if (searchText(N[order[k]]).indexOf(state.query) >= 0) state.matches.push(order[k]);
    }
    state.matchSet = new Set(state.matches);
    state.matchPos = -1;
    ui.found.textContent = state.query ? state.matches.length + " found" : "";
    drawRows();
  }
  function nextMatch(step) {
    if (!state.matches.length) return;
    state.matchPos = (state.matchPos + step + state.matches.length) % state.matches.length;
    ui.found.textContent = state.matchPos + 1 + " of " + state.matches.length;
    select(state.matches[state.matchPos]);
  }
  function findNode(ref) {
    if (byId.has(ref)) return byId.get(ref);
    if (ref.length < 4) return -1;
    var hit = -1;
    for (var k = 0; k < N.length; k++) if (N[k].id.indexOf(ref) === 0) { if (hit >= 0) return -1; hit = k; }
    return hit;
  }
  function hashParams() { return new URLSearchParams(location.hash.slice(1)); }
  function followHash() {
    var ref = hashParams().get("node");
    if (!ref) return false;
    var i = findNode(ref);
    if (i < 0) { ui.notice.textContent = "no node " + ref + " in this session"; return false; }
    ui.notice.textContent = "";
    if (i !== state.selected) { state.trail = i; select(i); }
    return true;
  }
  function onKey(e) {
    var tag = (e.target && e.target.tagName) || "";
    if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT") {
      if (e.key === "Escape") e.target.blur();
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "/") { e.preventDefault(); ui.search.focus(); ui.search.select(); }
    else if ("jk[]np".indexOf(e.key) >= 0 && e.key.length === 1) { e.preventDefault(); move(e.key); }
  }

  // -- the page ---------------------------------------------------------------

  function drawPinned() {
    ui.pinned.textContent = "";
    if (!pending.size) return;
    ui.pinned.appendChild(h("div", { class: "pinned-title", text: "Waiting for a human: " + pending.size + " pending pause" + (pending.size > 1 ? "s" : "") }));
    D.pending.forEach(function (id) {
      var i = byId.get(id);
      if (i === undefined) return;
      ui.pinned.appendChild(h("div", { class: "pinned-pause", onclick: function () { select(i); } },
        expired.has(id) ? h("span", { class: "badge expired", text: "‖ expired" }) : h("span", { class: "badge pending", text: "‖ pending" }),
        h("span", { class: "sid", text: short(id) }),
        h("span", { class: "label", text: ST.oneLine(label(N[i]), 140) }), h("span", { class: "time", text: ST.time(N[i].at) })));
    });
  }
  function build() {
    var app = document.getElementById("app");
    ui.search = h("input", { id: "search", type: "search", placeholder: "search  ( / )", autocomplete: "off" });
    ui.found = h("span", { id: "found", class: "muted" });
    ui.filter = h("select", { id: "filter", title: "filter the tree" },
      h("option", { value: "all", text: "everything" }), h("option", { value: "conversation", text: "conversation only" }),
      h("option", { value: "notools", text: "hide tool traffic" }), h("option", { value: "errors", text: "errors only" }));
    ui.count = h("span", { id: "count", class: "muted" });
    ui.notice = h("span", { id: "notice" });
    app.appendChild(h("header", {},  // an untitled session is named by its id once
      h("h1", { text: D.session.title || "untitled session" }), h("span", { class: "muted sid", text: D.session.id }),
      CONFIG.home ? h("a", { href: CONFIG.home, text: "all sessions" }) : null,
      h("span", { class: "spacer" }),
      ui.search, ui.found, ui.filter,
      h("button", { id: "prev-fork", title: "previous fork (p)", text: "↑ fork", onclick: function () { nextFork(-1); } }),
      h("button", { id: "next-fork", title: "next fork (n)", text: "↓ fork", onclick: function () { nextFork(1); } }),
      h("span", { class: "keys muted", text: "j/k path · [ ] siblings · n/p forks · / search" })));
    ui.pinned = h("div", { id: "pinned" });
    ui.inner = h("div", { id: "tree-inner" });
    ui.scroll = h("div", { id: "tree-scroll" }, ui.inner);
    ui.path = h("section", { id: "path" });
    app.appendChild(h("main", {}, h("section", { id: "tree" }, ui.pinned, h("div", { class: "tree-bar" }, ui.count, ui.notice), ui.scroll), ui.path));
    ui.scroll.addEventListener("scroll", scheduleRows, { passive: true });
    window.addEventListener("resize", scheduleRows);
    ui.filter.addEventListener("change", function () { state.filter = ui.filter.value; redraw(); scrollToRow(state.selected); drawRows(); });
    var timer = 0;
    ui.search.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(function () { search(ui.search.value); }, 120); });
    ui.search.addEventListener("keydown", function (e) {
      if (e.key === "Enter") { e.preventDefault(); clearTimeout(timer); if (state.query !== ui.search.value.trim().toLowerCase()) search(ui.search.value); nextMatch(e.shiftKey ? -1 : 1); }
    });
    document.addEventListener("keydown", onKey);
    window.addEventListener("hashchange", followHash);
  }

  // -- live updates (sessiontree serve) ---------------------------------------

  // The version of the data the page was built with: a change made before the first
  // poll differs from it, so it is shown (taking the first poll's answer would hide it).
  var version = CONFIG.live ? CONFIG.live.built : null;
  var pollTimer = null;
  var AWAY = "server unreachable; retrying";
  function StopPolling(message) { this.message = message; }  // an answer retrying cannot change
  function answer(r) {
    if (r.ok) return r.json();
    if (r.status === 404) throw new StopPolling("this session no longer exists");
    if (r.status >= 500) throw new Error("server error " + r.status);
    return r.json().catch(function () { return {}; }).then(function (body) {
      throw new StopPolling("the server refused: " + (body.error || r.status + " " + r.statusText));
    });
  }
  function poll() {
    if (!CONFIG.live || pollTimer === false) return;
    fetch(CONFIG.live.version, { cache: "no-store" }).then(answer).then(function (v) {
      if (ui.notice.textContent === AWAY) ui.notice.textContent = "";  // back
      if (v.version === version) return;
      return fetch(CONFIG.live.data, { cache: "no-store" }).then(answer).then(function (data) {
        version = v.version;  // only once shown: a failed fetch is tried again
        reload(data);
      });
    }).catch(function (e) {
      if (!(e instanceof StopPolling)) { ui.notice.textContent = AWAY; return; }
      if (pollTimer) clearInterval(pollTimer);
      pollTimer = false;  // no more polls, and none in flight may start one
      ui.notice.textContent = e.message;
      document.body.dataset.live = "stopped";
    });
  }
  function reload(data) {
    var selectedId = state.selected >= 0 ? N[state.selected].id : null;
    var followed = null;  // a selected branch head follows its branch
    if (selectedId) (headsAt.get(selectedId) || []).forEach(function (name) { if (!followed) followed = name; });
    var trailId = state.trail >= 0 ? N[state.trail].id : null;
    load(data);
    ui.notice.textContent = "";
    drawPinned();
    buildRows();
    var target = followed ? branchHead(followed) : -1;
    if (target < 0 && selectedId && byId.has(selectedId)) target = byId.get(selectedId);
    state.trail = trailId && byId.has(trailId) ? byId.get(trailId) : -1;
    if (state.query) search(ui.search.value);  // the matches were indexes into the old data
    if (target >= 0) select(target, true);
    else { state.selected = -1; state.pathSet = new Set(); drawRows(); drawPath(); }
    document.body.dataset.version = String(Number(document.body.dataset.version || 0) + 1);
  }

  load(ST.readJSON("st-data"));
  build();
  drawPinned();
  buildRows();
  if (!followHash()) {
    var start = branchHead(state.current);
    if (start < 0 && N.length) start = dfsOrder()[0];
    if (start >= 0) { state.trail = start; select(start); } else { drawRows(); drawPath(); }
    if (location.hash === "#node=" + (start >= 0 ? N[start].id : "")) history.replaceState(null, "", location.pathname + location.search);
  }
  if (CONFIG.live) { pollTimer = setInterval(poll, CONFIG.live.interval || 1500); poll(); }
  document.body.dataset.ready = "1";
  window.__stReady = performance.now();
})();
