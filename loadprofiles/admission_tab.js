// Admission tab charts: acceptor decisions per second, with the limits in force as
// dashed lines. Served by loadprofiles/webui.py; plain DOM + SVG, no dependencies
// (the UI must work offline). Drawn above Locust's extended table while ?tab=admission.
(function () {
  "use strict";
  var COLORS = {accepted: "#2e7d32", delayed: "#ef6c00", throttle_closed: "#6a1b9a", rejected: "#c62828"};
  var IP_COLORS = ["#1565c0", "#00838f", "#ad1457", "#558b2f", "#4e342e"];
  var W = 760, H = 210, PAD = 46, WINDOW_S = 120;
  var NS = "http://www.w3.org/2000/svg";

  function onPage() { return document.body && document.body.dataset.admissionPage === "1"; }
  function wanted() { return onPage() || new URLSearchParams(location.search).get("tab") === "admission"; }
  function base() { return onPage() ? "./admission/data" : "./admission/data"; }

  function el(tag, attrs, text) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function host() {
    var box = document.getElementById("harness-admission");
    if (box) return box;
    box = document.createElement("div");
    box.id = "harness-admission";
    box.style.cssText = "padding:8px 0;font:13px sans-serif;color:inherit";
    box.innerHTML = '<div data-role="status" style="margin-bottom:4px"></div>' +
      '<div data-role="listeners"></div><div data-role="ips"></div>';
    var anchor = document.getElementById("harness-admission-host");
    var table = document.querySelector("table");
    if (anchor) anchor.appendChild(box);
    else if (table) {
      var container = table.closest(".MuiTableContainer-root") || table;
      container.parentNode.insertBefore(box, container);
    } else (document.getElementById("root") || document.body).appendChild(box);
    return box;
  }

  function chart(title, series, limits, t1) {
    var svg = el("svg", {width: W, height: H, "data-role": "chart", style: "background:#fafafa;border:1px solid #ddd;margin:4px 0"});
    var ymax = 1;
    series.forEach(function (s) { s.points.forEach(function (p) { ymax = Math.max(ymax, p[1]); }); });
    Object.keys(limits).forEach(function (k) { ymax = Math.max(ymax, limits[k]); });
    ymax *= 1.15;
    var x = function (t) { return PAD + (W - PAD - 10) * (1 - (t1 - t) / WINDOW_S); };
    var y = function (v) { return H - 24 - (H - 40) * v / ymax; };
    svg.appendChild(el("text", {x: PAD, y: 13, "font-size": 12, "font-weight": "bold"}, title));
    for (var i = 0; i <= 4; i++) {
      var v = ymax * i / 4;
      svg.appendChild(el("line", {x1: PAD, x2: W - 10, y1: y(v), y2: y(v), stroke: "#e0e0e0"}));
      svg.appendChild(el("text", {x: PAD - 4, y: y(v) + 4, "font-size": 10, "text-anchor": "end"}, v.toFixed(0)));
    }
    svg.appendChild(el("text", {x: W - 10, y: H - 6, "font-size": 10, "text-anchor": "end"}, "last " + WINDOW_S + " s, conn/s"));
    Object.keys(limits).forEach(function (k) {
      svg.appendChild(el("line", {x1: PAD, x2: W - 10, y1: y(limits[k]), y2: y(limits[k]), stroke: "#000",
        "stroke-dasharray": "6,4", "data-role": "limit", "data-key": k}));
      svg.appendChild(el("text", {x: W - 12, y: y(limits[k]) - 3, "font-size": 10, "text-anchor": "end"}, k + " = " + limits[k]));
    });
    var lx = PAD + 4;
    series.forEach(function (s) {
      var pts = s.points.filter(function (p) { return t1 - p[0] <= WINDOW_S; })
        .map(function (p) { return x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1); });
      if (pts.length) svg.appendChild(el("polyline", {points: pts.join(" "), fill: "none", stroke: s.color,
        "stroke-width": 2, "data-role": "series", "data-name": s.name}));
      svg.appendChild(el("rect", {x: lx, y: 20, width: 10, height: 3, fill: s.color}));
      svg.appendChild(el("text", {x: lx + 13, y: 25, "font-size": 10}, s.name));
      lx += 16 + 6.2 * s.name.length;
    });
    return svg;
  }

  function draw(data) {
    var box = host();
    var pts = data.points || [];
    var status = box.querySelector('[data-role="status"]');
    var last = pts.length ? pts[pts.length - 1] : null;
    var totals = {};
    if (last) Object.keys(last.listeners).forEach(function (l) {
      Object.keys(last.listeners[l]).forEach(function (o) { totals[o] = (totals[o] || 0) + last.listeners[l][o]; });
    });
    status.textContent = data.error ? "metrics: " + data.error :
      (!data.metrics_url ? "set --metrics-url to the acceptor's /metrics to see admissions" :
        "polls " + data.polls + " | now: " + Object.keys(COLORS).map(function (o) {
          return o.replace("_", "-") + " " + (totals[o] || 0).toFixed(1) + "/s"; }).join(", "));
    status.setAttribute("data-polls", data.polls);
    var t1 = last ? last.t : 0;
    var lbox = box.querySelector('[data-role="listeners"]'), ibox = box.querySelector('[data-role="ips"]');
    lbox.innerHTML = ""; ibox.innerHTML = "";
    var listeners = {};
    pts.forEach(function (p) { Object.keys(p.listeners).forEach(function (l) { listeners[l] = 1; }); });
    var rl = data.rate_limits || {};
    Object.keys(listeners).sort().forEach(function (l) {
      var series = Object.keys(COLORS).map(function (o) {
        return {name: o.replace("_", "-"), color: COLORS[o], points: pts.filter(function (p) { return p.listeners[l]; })
          .map(function (p) { return [p.t, p.listeners[l][o] || 0]; })};
      });
      var limits = {};
      Object.keys(rl).forEach(function (k) {
        if (k === "max.connection.creation.rate" || k === "listener.name." + l.toLowerCase() + ".max.connection.creation.rate") limits[k] = rl[k];
      });
      lbox.appendChild(chart("listener " + l, series, limits, t1));
    });
    var ips = {};
    pts.forEach(function (p) { Object.keys(p.ips).forEach(function (ip) { ips[ip] = 1; }); });
    var ipSeries = Object.keys(ips).slice(0, IP_COLORS.length).map(function (ip, i) {
      // "accepted" counts every TCP accept; throttle-closed ones were un-recorded from
      // the IP's rate meter, so accepted minus throttle-closed is what its quota limits
      return {name: ip + " metered", color: IP_COLORS[i], points: pts.map(function (p) {
        var r = p.ips[ip] || {}; return [p.t, Math.max(0, (r.accepted || 0) - (r.throttle_closed || 0))]; })};
    });
    var ipLimits = {};
    var charted = {default: 1};
    ipSeries.forEach(function (s) { charted[s.name.split(" ")[0]] = 1; });
    Object.keys(rl).forEach(function (k) {
      var prefix = "ip.connection_creation_rate.";
      if (k.indexOf(prefix) === 0 && charted[k.slice(prefix.length)]) ipLimits[k] = rl[k];
    });
    if (ipSeries.length) ibox.appendChild(chart("top IPs", ipSeries, ipLimits, t1));
  }

  function tick() {
    if (!wanted()) {
      var old = document.getElementById("harness-admission");
      if (old) old.remove();
      return;
    }
    fetch(base(), {cache: "no-store"}).then(function (r) { return r.json(); }).then(draw)
      .catch(function (e) { host().querySelector('[data-role="status"]').textContent = "admission data: " + e; });
  }
  setInterval(tick, 1000);
  tick();
})();
