/* sessiontree serve: approve / reject / edit buttons for a pause (only with --allow-decide).
 *
 * Contract: STDecide.controls({pause, calls}, done) returns the buttons for one pause.
 * A decision is one POST of {decisions: {call id: {action, reason?, arguments?}}, by}
 * with the token in a header; the token comes from the URL fragment #token=...
 * printed by `sessiontree serve` and is kept in this tab's sessionStorage. With --deciders
 * (conf.deciders) the header is "Authorization: Bearer <decider token>" instead, the token
 * typed into the page, and no "by" is sent: the server records the token's name.
 * After a decision the server's "next" (what happens now: "approved; continuing", or the
 * command to run) is shown in a notice above the page, which outlives the inbox's redraw. */
var STDecide = (function () {
  var h = ST.h;
  var CONFIG = ST.readJSON("st-config") || {};
  var conf = CONFIG.decide;
  if (!conf) return null;
  var params = new URLSearchParams(location.hash.slice(1));
  if (params.get("token")) {
    sessionStorage.setItem("st-token", params.get("token"));
    params.delete("token");
    var rest = params.toString();
    history.replaceState(null, "", location.pathname + location.search + (rest ? "#" + rest : ""));
  }
  function token() { return sessionStorage.getItem("st-token") || ""; }
  function by() { return sessionStorage.getItem("st-by") || "web"; }
  function deciderToken() { return sessionStorage.getItem("st-decider") || ""; }
  function headers() {
    var x = { "Content-Type": "application/json" };
    if (conf.deciders) x.Authorization = "Bearer " + deciderToken(); else x[conf.header] = token();
    return x;
  }

  function post(pause, decisions, status, done) {
    status.textContent = "sending…";
    status.classList.remove("error");  // a refusal shown before is answered by this try
    fetch(conf.url.replace("{pause}", encodeURIComponent(pause)), {
      method: "POST", cache: "no-store",
      headers: headers(),
      body: JSON.stringify(conf.deciders ? { decisions: decisions } : { decisions: decisions, by: by() })
    }).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) throw new Error(body.error || r.statusText);
        status.textContent = body.next || "decided";
        notify(body.next || "decided");
        done();
      });
    }).catch(function (e) { status.textContent = String(e.message || e); status.classList.add("error"); });
  }

  function notify(text) {
    var el = document.getElementById("decided");
    if (!el) {
      el = h("p", { id: "decided", class: "notice", role: "status" });
      var app = document.getElementById("app");
      app.insertBefore(el, app.firstChild);
    }
    el.textContent = text;
  }

  function controls(p, done) {
    var status = h("span", { class: "status" });
    var reason = h("input", { type: "text", placeholder: "reason (for reject)", class: "reason" });
    var edits = h("div", { class: "edits", hidden: true });
    var areas = {};
    p.calls.forEach(function (c) {
      areas[c.id] = h("textarea", { "data-call": c.id, "aria-label": "arguments of " + c.name });
      areas[c.id].value = ST.pretty(c.arguments || "{}");
      ST.append(edits, h("label", { text: (c.name || "?") + " [" + c.id + "] arguments:" }), areas[c.id]);
    });
    function all(action) {
      var out = {};
      p.calls.forEach(function (c) { out[c.id] = action === "reject" ? { action: "reject", reason: reason.value } : { action: action }; });
      return out;
    }
    function saveEdits() {
      var out = {};
      try {
        p.calls.forEach(function (c) {
          var text = areas[c.id].value, before = ST.pretty(c.arguments || "{}");
          out[c.id] = text === before ? { action: "approve" } : { action: "edit", arguments: JSON.parse(text) };
        });
      } catch (e) { status.textContent = "arguments are not valid JSON: " + e.message; return; }
      post(p.pause, out, status, done);
    }
    var saveButton = h("button", { class: "save-edit", text: "approve with these arguments", onclick: saveEdits });
    edits.appendChild(saveButton);
    var box = h("div", { class: "decide", "data-pause": p.pause },
      h("div", { class: "buttons" },
        h("button", { class: "approve", text: "approve", onclick: function (e) { e.stopPropagation(); post(p.pause, all("approve"), status, done); } }),
        h("button", { class: "reject", text: "reject", onclick: function (e) { e.stopPropagation(); post(p.pause, all("reject"), status, done); } }),
        reason,
        h("button", { class: "edit", text: "edit arguments…", onclick: function (e) { e.stopPropagation(); edits.hidden = !edits.hidden; } }),
        status),
      edits);
    box.addEventListener("click", function (e) { e.stopPropagation(); });
    if (!conf.deciders && !token()) status.textContent = "no token: open the URL printed by `sessiontree serve --allow-decide`";
    return box;
  }
  return { controls: controls, token: token, by: by, deciderToken: deciderToken, named: !!conf.deciders };
})();
