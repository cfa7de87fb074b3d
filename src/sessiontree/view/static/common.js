/* sessiontree view: helpers shared by every page.
 * Contract: the DOM is built only with createElement and textContent (h() below);
 * no HTML string is ever parsed, so any text from a payload stays text. */
"use strict";
var ST = (function () {
  function h(tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) {
      for (var key in attrs) {
        var value = attrs[key];
        if (value === undefined || value === null || value === false) continue;
        if (key === "class") node.className = value;
        else if (key === "text") node.textContent = value;
        else if (key.slice(0, 2) === "on") node.addEventListener(key.slice(2), value);
        else if (key === "style") Object.assign(node.style, value);
        else node.setAttribute(key, value === true ? "" : String(value));
      }
    }
    for (var i = 2; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  }
  function append(node) {  // append(node, child, child, ...): arrays are flattened, null skipped
    for (var i = 1; i < arguments.length; i++) {
      var child = arguments[i];
      if (child === undefined || child === null || child === false) continue;
      if (Array.isArray(child)) child.forEach(function (c) { append(node, c); });
      else if (typeof child === "object") node.appendChild(child);
      else node.appendChild(document.createTextNode(String(child)));
    }
  }
  function readJSON(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }
  function oneLine(text, width) {
    text = String(text === undefined || text === null ? "" : text).replace(/\s+/g, " ").trim();
    width = width || 120;
    return text.length > width ? text.slice(0, width - 1) + "…" : text;
  }
  function contentText(content) {
    if (content === null || content === undefined) return "";
    if (typeof content === "string") return content;
    if (Array.isArray(content)) {
      return content.map(function (part) {
        if (part && typeof part === "object") return part.text !== undefined ? String(part.text) : "[" + (part.type || "part") + "]";
        return String(part);
      }).join("\n");
    }
    return JSON.stringify(content);
  }
  function args(text) {
    if (typeof text !== "string") return JSON.stringify(text);
    try {
      var value = JSON.parse(text);
      if (value && typeof value === "object" && !Array.isArray(value)) {
        return Object.keys(value).map(function (k) { return k + "=" + JSON.stringify(value[k]); }).join(", ");
      }
    } catch (e) { /* not JSON: shown as the model wrote it */ }
    return text;
  }
  function pretty(value) {
    if (typeof value === "string") {
      try { return JSON.stringify(JSON.parse(value), null, 2); } catch (e) { return value; }
    }
    return JSON.stringify(value, null, 2);
  }
  function time(iso) { return iso ? String(iso).replace("T", " ").replace(/\.\d+Z?$/, "").replace(/Z$/, "") : ""; }
  function num(n) { return n >= 10000 ? (n / 1000).toFixed(1) + "k" : String(n); }
  function ms(n) { return n >= 1000 ? (n / 1000).toFixed(2) + " s" : Math.round(n) + " ms"; }
  function money(n) { return "$" + (n >= 1 ? n.toFixed(2) : n.toPrecision(2)); }
  return { h: h, append: append, readJSON: readJSON, oneLine: oneLine, contentText: contentText,
           args: args, pretty: pretty, time: time, num: num, ms: ms, money: money };
})();
