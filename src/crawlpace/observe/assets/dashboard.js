// The crawlpace dashboard: polls /api/state every second and redraws.
// No dependencies: crawl machines are often offline.
"use strict";
(function () {
  const token = new URLSearchParams(window.location.search).get("token");
  const stateUrl = "api/state" + (token ? "?token=" + encodeURIComponent(token) : "");
  const SVG = "http://www.w3.org/2000/svg";
  // Short words for the rule that sets the limit, shown under it.
  const RULES = {"server's pace": "server", "rampup": "rampup", "delay": "delay", "slots": "slots",
                 "Crawl-delay": "crawl-delay"};

  function fmt(value, digits) {
    if (value === null || value === undefined) return "–";
    if (typeof value !== "number") return String(value);
    if (!isFinite(value)) return "∞";
    return value.toFixed(digits === undefined ? 2 : digits);
  }

  function cell(row, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  function spark(points) {
    const width = 160, height = 32;
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "spark");
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    if (points.length < 2) return svg;
    let top = 0;
    for (const p of points) {
      top = Math.max(top, p[1] || 0, p[2] && isFinite(p[2]) ? p[2] : 0);
    }
    top = top > 0 ? top * 1.1 : 1;
    const t0 = points[0][0], t1 = points[points.length - 1][0];
    const span = t1 > t0 ? t1 - t0 : 1;
    function line(index, cls) {
      const coords = [];
      for (const p of points) {
        const v = p[index];
        if (v === null || v === undefined || !isFinite(v)) continue;
        const x = ((p[0] - t0) / span) * (width - 2) + 1;
        const y = height - 1 - (v / top) * (height - 2);
        coords.push(x.toFixed(1) + "," + y.toFixed(1));
      }
      if (coords.length < 2) return;
      const path = document.createElementNS(SVG, "polyline");
      path.setAttribute("class", cls);
      path.setAttribute("points", coords.join(" "));
      svg.appendChild(path);
    }
    line(2, "limit");
    line(1, "rate");
    return svg;
  }

  function render(state) {
    document.getElementById("mode").textContent = state.mode === "fleet"
      ? "fleet view of " + state.source : "this process";
    const t = state.totals;
    document.getElementById("summary").textContent =
      state.scopes.length + " scopes shown of " + t.scopes + " · " + t.sends + " sends · " +
      (t.pushbacks === null ? "pushbacks: see each worker's metrics" : t.pushbacks + " pushbacks") +
      " · " + t.errors + " errors · " + fmt(t.rate, 1) + " sends/s";
    const body = document.querySelector("#scopes tbody");
    body.textContent = "";
    for (const s of state.scopes) {
      const row = document.createElement("tr");
      row.dataset.scope = s.scope;
      const named = s.site && s.site !== s.scope;
      if (named) row.dataset.site = s.site;
      if (s.state !== "ok") row.className = "attention";
      // The site's name where it is known (--sites), its scope key beside it.
      const scopeCell = cell(row, named ? s.site : s.scope, "scope");
      if (named) {
        const key = document.createElement("span");
        key.className = "key";
        key.textContent = s.scope;
        scopeCell.appendChild(key);
      }
      cell(row, s.state, "state state-" + s.state.replace(/[^a-z]+/g, "-"));
      const graph = cell(row, "", "graph");
      graph.appendChild(spark(s.points));
      cell(row, fmt(s.rate, 2), "rate");
      const limitCell = cell(row, fmt(s.limit, 2), "limit");
      if (s.limit_by) {
        // Which rule binds: the server's announced pace, rampup, the delay, the slots, a Crawl-delay.
        const by = document.createElement("span");
        by.className = "by";
        by.textContent = RULES[s.limit_by] || s.limit_by;
        limitCell.appendChild(by);
        limitCell.title = "the lowest rule that binds: " + s.limit_by +
          (s.pace ? " (the server announced one request per " + fmt(s.pace, 3) + "s)" : "");
      }
      cell(row, fmt(s.delay, 3) + "s", "delay");
      cell(row, s.inflight + "/" + s.concurrency, "inflight");
      cell(row, String(s.queued), "queued");
      cell(row, String(s.sends), "sends");
      cell(row, s.pushbacks === null ? "–" : String(s.pushbacks), "pushbacks");
      cell(row, String(s.errors), "errors");
      cell(row, String(s.backoff), s.backoff > 0 ? "backoff backoff-on" : "backoff");
      cell(row, s.hold_in ? fmt(s.hold_in, 1) + "s" : "–", "hold");
      cell(row, s.crawl_delay ? fmt(s.crawl_delay, 1) + "s" : "–", "crawl-delay");
      cell(row, s.breaker, "breaker breaker-" + s.breaker);
      cell(row, fmt(s.quota_remaining, 1), "quota");
      let urls = "–";
      if (s.urls) {
        const parts = Object.entries(s.urls.outcomes).map(([k, v]) => v + " " + k);
        urls = parts.join(", ") || "0";
      }
      const urlCell = cell(row, urls, "urls");
      if (s.urls && s.urls.note) urlCell.title = s.urls.note;
      body.appendChild(row);
    }
    const fleet = document.getElementById("fleet");
    if (state.workers || state.frontier) {
      fleet.hidden = false;
      const wbody = document.querySelector("#workers tbody");
      wbody.textContent = "";
      for (const [name, ago] of Object.entries(state.workers || {})) {
        const row = document.createElement("tr");
        row.dataset.worker = name;
        const stale = ago > (state.stale_after || 15);
        if (stale) row.className = "stale-worker";
        cell(row, name, "worker");
        cell(row, fmt(ago, 1) + "s ago" + (stale ? " (stale: not heard from)" : ""), "ago");
        wbody.appendChild(row);
      }
      const f = state.frontier;
      let ended = "";
      if (f && f.outcomes) {
        const notOk = Object.entries(f.outcomes).filter(([k, v]) => k !== "ok" && v > 0);
        if (notOk.length) ended = " (" + notOk.map(([k, v]) => v + " " + k).join(", ") + ")";
      }
      document.getElementById("frontier").textContent = f
        ? "frontier: " + f.queued + " queued, " + f.claimed + " claimed, " + f.done + " done of " +
          f.enqueued + ended : "no shared frontier";
    }
    const footer = document.getElementById("status");
    footer.className = "";
    footer.textContent = "updated " + new Date(state.now * 1000).toLocaleTimeString() +
      " · sample " + state.samples;
  }

  async function poll() {
    try {
      const answer = await fetch(stateUrl, {cache: "no-store"});
      if (!answer.ok) throw new Error("HTTP " + answer.status);
      render(await answer.json());
    } catch (err) {
      const footer = document.getElementById("status");
      footer.className = "stale";
      footer.textContent = "cannot reach the crawl (" + err.message + "); retrying";
    }
    window.setTimeout(poll, 1000);
  }
  poll();
})();
