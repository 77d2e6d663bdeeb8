// perftracker web UI (PerfDisplay): a small single-page app over the server's JSON API.
//
// Pages (hash routes, every segment URI-encoded):
//   #/                                    jobs
//   #/job/<job>                           a job: iteration time per worker, its windows side by
//                                         side (compare, Perfetto download, baseline), workers
//   #/job/<job>/window/<id>               a diagnosis: findings + evidence, worker x function heat map
//   #/job/<job>/window/<id>/function/<key> one function on every worker (drill-down)
//   #/job/<job>/compare/<base>/<cur>      what changed from window <base> to window <cur>
//
// Safety: every value shown comes from user code or collectors (function names, command
// lines, hosts). The DOM is built with createElement/textContent only — never innerHTML —
// so nothing a job names can become markup or script. The server's Content-Security-Policy
// allows only this file and uPlot as scripts.
"use strict";

(function () {
  const app = document.getElementById("app");
  const crumbs = document.getElementById("crumbs");
  let refreshTimer = null;
  const charts = [];

  // ---- DOM helpers --------------------------------------------------------------------

  // el("div", {class: "x", dataset: {code: "C"}}, "text", childNode, [more, children])
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null) continue;
      if (key === "class") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key === "title") node.title = String(value);
      else if (key === "href") node.setAttribute("href", value);
      else if (key === "onclick" || key === "onchange") node.addEventListener(key.slice(2), value);
      else if (key === "style") Object.assign(node.style, value);
      else node.setAttribute(key, String(value));
    }
    append(node, children);
    return node;
  }
  function append(node, children) {
    for (const child of children) {
      if (child === undefined || child === null || child === false) continue;
      if (Array.isArray(child)) append(node, child);
      else if (child instanceof Node) node.appendChild(child);
      else node.appendChild(document.createTextNode(String(child)));
    }
  }
  function link(text, hash, attrs) {
    return el("a", Object.assign({href: hash}, attrs || {}), text);
  }
  function jobHash(job) {
    return "#/job/" + encodeURIComponent(job);
  }
  function windowHash(job, id) {
    return jobHash(job) + "/window/" + encodeURIComponent(id);
  }
  function functionHash(job, id, key) {
    return windowHash(job, id) + "/function/" + encodeURIComponent(key);
  }
  function compareHash(job, base, cur) {
    return jobHash(job) + "/compare/" + encodeURIComponent(base) + "/" + encodeURIComponent(cur);
  }
  function jobApi(job) {
    return "/api/v1/jobs/" + encodeURIComponent(job);
  }
  // The window's Perfetto export (the server streams the file its store recorded for it).
  function perfettoLink(job, id) {
    return el("a", {href: jobApi(job) + "/windows/" + encodeURIComponent(id) + "/perfetto",
      download: "window-" + id + ".perfetto.json", class: "perfetto",
      title: "the window's timeline, every rank aligned, findings drawn on it: open it in ui.perfetto.dev or chrome://tracing"},
    "Perfetto trace");
  }

  // ---- formatting ---------------------------------------------------------------------

  function ms(value) {
    if (value === undefined || value === null || !isFinite(value)) return "–";
    if (value === 0) return "0";
    if (value >= 1000) return (value / 1000).toFixed(2) + " s";
    if (value >= 100) return value.toFixed(0) + " ms";
    if (value >= 1) return value.toFixed(1) + " ms";
    return (value * 1000).toFixed(0) + " µs";
  }
  function pct(share) {
    return (100 * share).toFixed(share < 0.1 ? 1 : 0) + "%";
  }
  function when(epochMs) {
    if (!epochMs) return "–";
    return new Date(epochMs).toLocaleString();
  }
  function ranks(list) {
    if (!list || list.length === 0) return "all workers";
    if (list.length > 12) return "ranks " + list.slice(0, 12).join(", ") + ", … (" + list.length + ")";
    return (list.length === 1 ? "rank " : "ranks ") + list.join(", ");
  }
  function median(values) {
    const v = values.filter((x) => isFinite(x)).sort((a, b) => a - b);
    if (v.length === 0) return NaN;
    const mid = v.length >> 1;
    return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
  }

  // ---- API ----------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }
  async function api(path, options) {
    const res = await fetch(path, Object.assign({credentials: "same-origin"}, options || {}));
    let body = null;
    try {
      body = await res.json();
    } catch (e) {
      body = null;
    }
    if (!res.ok) {
      const message = body && body.error ? body.error : res.status + " " + res.statusText;
      throw new ApiError(res.status, message);
    }
    return body;
  }

  // ---- page plumbing ------------------------------------------------------------------

  function setCrumbs(parts) {
    crumbs.replaceChildren();
    for (const [text, hash] of parts) {
      crumbs.appendChild(el("span", {class: "sep"}, "/"));
      crumbs.appendChild(hash ? link(text, hash) : el("span", {}, text));
    }
  }
  function show(...nodes) {
    for (const chart of charts.splice(0)) chart.destroy();
    app.replaceChildren();
    append(app, nodes);
  }
  function showError(err) {
    const msg = err instanceof ApiError && err.status === 401
        ? "This server needs its token: open the login URL it printed when it started (…/?token=<token>)."
        : String(err.message || err);
    show(el("div", {class: "error", role: "alert"}, msg));
  }

  async function route() {
    if (refreshTimer) {
      clearInterval(refreshTimer);
      refreshTimer = null;
    }
    const parts = location.hash.replace(/^#\/?/, "").split("/").filter((p) => p !== "")
        .map((p) => { try { return decodeURIComponent(p); } catch (e) { return p; } });
    try {
      if (parts.length === 0) return await jobsPage();
      if (parts[0] === "job" && parts.length === 2) return await jobPage(parts[1]);
      if (parts[0] === "job" && parts[2] === "window" && parts.length === 4) {
        return await diagnosisPage(parts[1], parts[3]);
      }
      if (parts[0] === "job" && parts[2] === "window" && parts[4] === "function" && parts.length === 6) {
        return await functionPage(parts[1], parts[3], parts[5]);
      }
      if (parts[0] === "job" && parts[2] === "compare" && parts.length === 5) {
        return await comparePage(parts[1], parts[3], parts[4]);
      }
      show(el("div", {class: "error"}, "No such page: " + location.hash));
    } catch (err) {
      showError(err);
    }
  }

  // ---- jobs ---------------------------------------------------------------------------

  async function jobsPage() {
    setCrumbs([["jobs", null]]);
    const data = await api("/api/v1/jobs");
    if (data.jobs.length === 0) {
      show(el("h1", {}, "Jobs"), el("p", {class: "muted"},
          "No job has registered yet. Start one under `perftracker run --server …`."));
      return;
    }
    const rows = data.jobs.map((j) => el("tr", {dataset: {job: j.job_id}},
        el("td", {}, link(j.job_id, jobHash(j.job_id))),
        el("td", {class: "title"}, j.title),
        el("td", {class: "num"}, j.world_size),
        el("td", {class: "num"}, j.windows),
        el("td", {}, j.latest_top_code
            ? link(j.latest_top_code, windowHash(j.job_id, j.latest_window_id), {class: "code"})
            : el("span", {class: "muted"}, j.latest_window_id ? "no material finding" : "–")),
        el("td", {}, when(j.last_seen_ms))));
    show(el("h1", {}, "Jobs"),
        el("table", {class: "grid", id: "jobs"},
            el("thead", {}, el("tr", {}, ["job", "command", "workers", "windows", "latest finding",
              "last seen"].map((h) => el("th", {}, h)))),
            el("tbody", {}, rows)));
  }

  // ---- a job --------------------------------------------------------------------------

  const kMaxSeries = 16;
  const kBuckets = 300;
  const kPalette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a", "#8ca252", "#bd9e39", "#637939",
    "#7b4173"];

  // Points [rank, end_ms, duration_ms] -> uPlot data on a shared time axis (buckets): one
  // series per rank for small jobs, else min / median / max over ranks and the slowest rank.
  function iterationSeries(points) {
    const byRank = new Map();
    let t0 = Infinity;
    let t1 = -Infinity;
    for (const [rank, end, dur] of points) {
      if (!byRank.has(rank)) byRank.set(rank, []);
      byRank.get(rank).push([end, dur]);
      t0 = Math.min(t0, end);
      t1 = Math.max(t1, end);
    }
    const rankList = [...byRank.keys()].sort((a, b) => a - b);
    const buckets = Math.max(1, Math.min(kBuckets, Math.ceil(points.length / Math.max(1, rankList.length))));
    const width = (t1 - t0) / buckets || 1;
    const xs = [];
    for (let b = 0; b < buckets; ++b) xs.push((t0 + (b + 0.5) * width) / 1000);  // seconds
    const perRank = new Map();
    for (const rank of rankList) {
      const sum = new Array(buckets).fill(0);
      const n = new Array(buckets).fill(0);
      for (const [end, dur] of byRank.get(rank)) {
        const b = Math.min(buckets - 1, Math.floor((end - t0) / width));
        sum[b] += dur;
        n[b] += 1;
      }
      perRank.set(rank, sum.map((s, i) => (n[i] ? s / n[i] : null)));
    }
    if (rankList.length <= kMaxSeries) {
      return {xs, series: rankList.map((rank, i) => ({label: "rank " + rank,
        color: kPalette[i % kPalette.length], values: perRank.get(rank)}))};
    }
    const mins = [];
    const meds = [];
    const maxs = [];
    for (let b = 0; b < buckets; ++b) {
      const v = rankList.map((r) => perRank.get(r)[b]).filter((x) => x !== null);
      mins.push(v.length ? Math.min(...v) : null);
      meds.push(v.length ? median(v) : null);
      maxs.push(v.length ? Math.max(...v) : null);
    }
    return {xs, series: [
      {label: "max over ranks", color: "#d62728", values: maxs},
      {label: "median", color: "#1f77b4", values: meds},
      {label: "min over ranks", color: "#2ca02c", values: mins}]};
  }

  function iterationChart(container, points) {
    const {xs, series} = iterationSeries(points);
    const opts = {
      width: Math.max(400, container.clientWidth || 900),
      height: 300,
      scales: {x: {time: true}},
      axes: [{}, {label: "iteration time (ms)", size: 60}],
      series: [{}].concat(series.map((s) => ({label: s.label, stroke: s.color, width: 1.5,
        spanGaps: true, value: (u, v) => (v === null ? "–" : ms(v))}))),
    };
    const chart = new uPlot(opts, [xs].concat(series.map((s) => s.values)), container);
    charts.push(chart);
    return chart;
  }

  async function jobPage(job) {
    setCrumbs([["jobs", "#/"], [job, null]]);
    const [info, iters] = await Promise.all([
      api("/api/v1/jobs/" + encodeURIComponent(job)),
      api("/api/v1/jobs/" + encodeURIComponent(job) + "/iterations?limit=200000")]);
    const chartBox = el("div", {class: "chart", id: "iteration-chart"});
    const status = el("span", {class: "muted"});
    const trigger = el("button", {type: "button", onclick: async () => {
      trigger.disabled = true;
      try {
        await api("/api/v1/jobs/" + encodeURIComponent(job) + "/trigger", {method: "POST"});
        status.textContent = "window requested: it appears below once the workers have reported.";
      } catch (err) {
        status.textContent = "could not open a window: " + err.message;
      } finally {
        trigger.disabled = false;
      }
    }}, "Profile a window now");

    const windows = info.windows.slice().reverse().map((w) => windowCard(job, w, info.baseline_window));
    const workers = info.workers.map((w) => el("tr", {},
        el("td", {class: "num"}, w.rank), el("td", {}, w.host), el("td", {class: "num"}, w.pid)));

    show(el("h1", {}, "Job ", el("span", {class: "mono"}, job)),
        el("p", {class: "title"}, info.job.title),
        el("p", {class: "muted"}, info.job.world_size + " workers · registered " + when(info.job.created_ms) +
            " · last seen " + when(info.job.last_seen_ms) +
            (info.baseline_window ? " · healthy baseline: window " + info.baseline_window : "")),
        el("h2", {}, "Iteration time per worker"),
        iters.points.length ? chartBox : el("p", {class: "muted"}, "No iteration reported yet."),
        el("h2", {}, "Profiling windows"),
        el("p", {}, trigger, " ", status),
        info.windows.length
            ? [el("p", {class: "muted"}, "Newest first. " + (info.baseline_window
                ? "Each window can be compared with the baseline, window " + info.baseline_window +
                  ": what got slower or faster on every rank."
                : "No baseline yet: the first window without a material finding becomes it, or use one as the baseline.")),
              el("div", {class: "windows", id: "windows"}, windows)]
            : el("p", {class: "muted"}, "No window yet: one opens when a worker slows down or hangs."),
        el("h2", {}, "Workers"),
        el("table", {class: "grid narrow", id: "workers"},
            el("thead", {}, el("tr", {}, ["rank", "host", "pid"].map((h) => el("th", {}, h)))),
            el("tbody", {}, workers)));

    if (iters.points.length) {
      let points = iters.points;
      let since = iters.next_since;
      let chart = iterationChart(chartBox, points);
      // Live: new iterations every 5 s, appended and re-bucketed.
      refreshTimer = setInterval(async () => {
        try {
          const more = await api("/api/v1/jobs/" + encodeURIComponent(job) +
              "/iterations?since=" + encodeURIComponent(since));
          if (!more.points.length) return;
          since = more.next_since;
          points = points.concat(more.points).slice(-200000);
          chart.destroy();
          charts.splice(charts.indexOf(chart), 1);
          chartBox.replaceChildren();
          chart = iterationChart(chartBox, points);
        } catch (err) {
          // keep the last chart; the next tick retries
        }
      }, 5000);
    }
  }

  // One window as a card; the job page shows them side by side.
  function windowCard(job, w, baseline) {
    const isBaseline = baseline === w.window_id;
    const note = el("div", {class: "muted card-status"});
    // A link that looks like a button: the compare view is a page of its own (shareable).
    const comparable = baseline && !isBaseline && w.has_diagnosis;
    const compare = comparable
      ? link("Compare with baseline", compareHash(job, baseline, w.window_id),
          {class: "button compare", title: "what changed since window " + baseline})
      : el("button", {type: "button", class: "compare", disabled: "",
        title: !baseline ? "this job has no baseline window yet" : isBaseline ? "this is the baseline"
            : "this window has no diagnosis"}, "Compare with baseline");
    const mark = w.has_diagnosis && !isBaseline ? el("button", {type: "button", class: "mark-baseline",
      title: "compare later windows with this one", onclick: async () => {
        mark.disabled = true;
        try {
          await api(jobApi(job) + "/baseline?window=" + encodeURIComponent(w.window_id), {method: "POST"});
          route();
        } catch (err) {
          note.textContent = "could not mark the baseline: " + err.message;
          mark.disabled = false;
        }
      }}, "Use as baseline") : null;
    const triggers = w.triggers.slice(0, 3).join("; ") +
        (w.triggers.length > 3 ? " (+" + (w.triggers.length - 3) + ")" : "");
    return el("section", {class: "window-card" + (isBaseline ? " baseline" : ""),
      dataset: {window: w.window_id}},
    el("h3", {}, w.has_diagnosis ? link("window " + w.window_id, windowHash(job, w.window_id)) : "window " + w.window_id,
        isBaseline ? el("span", {class: "badge"}, "baseline") : null),
    el("table", {class: "kv"}, el("tbody", {},
        el("tr", {}, el("th", {}, "state"), el("td", {},
            el("span", {class: "state " + w.state, title: w.state_reason || undefined}, w.state),
            w.state_reason ? el("div", {class: "muted state-reason"}, w.state_reason) : null)),
        el("tr", {}, el("th", {}, "reason"), el("td", {}, w.reason)),
        el("tr", {}, el("th", {}, "started"), el("td", {}, when(w.start_ms))),
        el("tr", {}, el("th", {}, "length"), el("td", {}, ms(w.duration_ms))),
        el("tr", {}, el("th", {}, "top finding"), el("td", {}, w.top_code
            ? link(w.top_code, windowHash(job, w.window_id), {class: "code"})
            : el("span", {class: "muted"}, w.has_diagnosis ? "no material finding" : "–"))),
        triggers ? el("tr", {}, el("th", {}, "triggered by"), el("td", {class: "triggers"}, triggers)) : null)),
    el("div", {class: "actions"}, compare, mark, w.has_perfetto ? perfettoLink(job, w.window_id) : null),
    note);
  }

  // ---- what changed between two windows -----------------------------------------------

  function windowSide(job, role, w, run) {
    return el("section", {class: "side " + role, dataset: {window: w ? w.window_id : ""}},
        el("h3", {}, role + ": ", w ? link("window " + w.window_id, windowHash(job, w.window_id)) : "–"),
        el("table", {class: "kv"}, el("tbody", {},
            el("tr", {}, el("th", {}, "median iteration"), el("td", {class: "iteration"}, ms(run.median_iteration_ms))),
            el("tr", {}, el("th", {}, "workers"), el("td", {}, run.num_workers)),
            w ? el("tr", {}, el("th", {}, "started"), el("td", {}, when(w.start_ms))) : null,
            w ? el("tr", {}, el("th", {}, "state"), el("td", {}, el("span", {class: "state " + w.state}, w.state))) : null,
            w ? el("tr", {}, el("th", {}, "top finding"), el("td", {}, w.top_code
                ? link(w.top_code, windowHash(job, w.window_id), {class: "code"})
                : el("span", {class: "muted"}, w.has_diagnosis ? "no material finding" : "–"))) : null)),
        w && w.has_perfetto ? el("p", {}, perfettoLink(job, w.window_id)) : null);
  }

  function changeRow(c) {
    const sign = c.delta_ms_per_iteration > 0 ? "+" : "";
    return [el("tr", {class: "change " + c.direction, dataset: {function: c.function, direction: c.direction,
      workers: c.workers.join(",")}},
    el("td", {}, el("span", {class: "direction"}, c.direction)),
    el("td", {}, el("span", {class: "mono", title: c.function_key}, c.function),
        c.time_goes_into ? el("div", {class: "muted small"}, "time goes into " + c.time_goes_into) : null),
    el("td", {}, ranks(c.workers)),
    el("td", {class: "num"}, ms(c.baseline_ms_per_iteration)),
    el("td", {class: "num"}, ms(c.current_ms_per_iteration)),
    el("td", {class: "num delta"}, sign + ms(c.delta_ms_per_iteration)),
    el("td", {class: "num"}, pct(Math.abs(c.delta_share)))),
    el("tr", {class: "change-ranks"}, el("td", {colspan: 7}, el("details", {},
        el("summary", {}, "per rank"),
        el("table", {class: "grid narrow"}, el("thead", {}, el("tr", {}, ["rank", "baseline / iter",
          "current / iter", "change beyond the shared factor", "material"].map((h) => el("th", {}, h)))),
        el("tbody", {}, c.ranks.map((r) => el("tr", {class: r.material ? "culprit" : null},
            el("td", {class: "num"}, r.rank), el("td", {class: "num"}, ms(r.baseline_ms_per_iteration)),
            el("td", {class: "num"}, ms(r.current_ms_per_iteration)),
            el("td", {class: "num"}, (r.delta_ms_per_iteration > 0 ? "+" : "") + ms(r.delta_ms_per_iteration)),
            el("td", {}, r.material ? "yes" : "no"))))))))];
  }

  async function comparePage(job, base, cur) {
    setCrumbs([["jobs", "#/"], [job, jobHash(job)], ["window " + cur + " vs " + base, null]]);
    const [info, c] = await Promise.all([api(jobApi(job)),
      api(jobApi(job) + "/compare?baseline=" + encodeURIComponent(base) + "&current=" + encodeURIComponent(cur))]);
    const byId = new Map(info.windows.map((w) => [w.window_id, w]));
    const choices = info.windows.filter((w) => w.has_diagnosis || w.state === "diagnosed");
    const picker = (id, selected, onPick) => el("select", {id: id, onchange: (e) => onPick(e.target.value)},
        choices.map((w) => {
          const o = el("option", {value: w.window_id}, "window " + w.window_id +
              (w.window_id === info.baseline_window ? " (baseline)" : "") + (w.top_code ? " · " + w.top_code : ""));
          if (String(w.window_id) === String(selected)) o.selected = true;
          return o;
        }));
    const shared = c.shared_scale && Math.abs(c.shared_scale - 1) >= 0.005
        ? "Every function shares a factor of ×" + c.shared_scale.toFixed(2) + " (" +
          (c.shared_delta_ms_per_iteration > 0 ? "+" : "") + ms(c.shared_delta_ms_per_iteration) + " per iteration)" +
          (c.shared_material ? ": a change of the whole job." : ": within the noise, not applied.")
        : "No factor that every function shares.";
    show(el("h1", {}, "Window " + c.current_window + " against window " + c.baseline_window + " of ",
        link(job, jobHash(job), {class: "mono"})),
    el("p", {class: "pickers"}, "baseline ", picker("pick-baseline", c.baseline_window,
        (v) => { location.hash = compareHash(job, v, c.current_window); }),
    " current ", picker("pick-current", c.current_window,
        (v) => { location.hash = compareHash(job, c.baseline_window, v); })),
    el("p", {class: "verdict", id: "compare-verdict"}, c.verdict),
    el("div", {class: "side-by-side", id: "side-by-side"},
        windowSide(job, "baseline", byId.get(c.baseline_window), c.baseline),
        windowSide(job, "current", byId.get(c.current_window), c.current)),
    el("p", {class: "muted", id: "shared"}, shared + " A change counts when it passes " +
        ms(c.bar_ms_per_iteration) + " per iteration on the median rank (the larger of its noise " +
        "and the material share of its iteration)."),
    (c.notes || []).length ? el("ul", {class: "notes"}, c.notes.map((n) => el("li", {}, n))) : null,
    el("h2", {}, "What changed"),
    c.changes.length
        ? el("table", {class: "grid", id: "changes"},
            el("thead", {}, el("tr", {}, ["", "function", "on", "baseline / iter", "current / iter",
              "change / iter", "of the iteration"].map((h) => el("th", {}, h)))),
            el("tbody", {}, c.changes.map(changeRow)))
        : el("p", {class: "muted", id: "changes"}, c.compared_functions
            ? "No function changed beyond the bar." : "The runs carried no function times: iterations only."),
    el("h2", {}, "Iteration time per worker"),
    el("table", {class: "grid narrow", id: "compare-workers"},
        el("thead", {}, el("tr", {}, ["rank", "host", "baseline", "current", "bar", "changed"].map((h) => el("th", {}, h)))),
        el("tbody", {}, c.workers.map((w) => el("tr", {dataset: {rank: w.rank}},
            el("td", {class: "num"}, w.rank), el("td", {}, w.host),
            el("td", {class: "num"}, ms(w.baseline_iteration_ms)), el("td", {class: "num"}, ms(w.current_iteration_ms)),
            el("td", {class: "num"}, ms(w.bar_ms)), el("td", {}, w.material ? "yes" : "no"))))));
  }

  // ---- a diagnosis --------------------------------------------------------------------

  function findingCard(job, windowId, f, index) {
    const evidence = (f.evidence || []).map((e) => el("tr", {}, el("th", {}, e.label), el("td", {}, e.value)));
    return el("section", {class: "finding" + (f.material ? " material" : ""),
      dataset: {code: f.code, workers: (f.workers || []).join(",")}},
    el("h3", {}, el("span", {class: "rank-no"}, "#" + (index + 1)), " ",
        el("span", {class: "code"}, f.code), " ", el("span", {class: "category"}, f.category),
        " ", el("span", {class: "culprits"}, ranks(f.workers))),
    el("p", {class: "finding-title"}, f.title),
    el("table", {class: "kv"},
        el("tbody", {},
            f.function ? el("tr", {}, el("th", {}, "function"), el("td", {}, el("span", {class: "mono"}, f.function))) : null,
            f.function_key ? el("tr", {}, el("th", {}, "call path"), el("td", {class: "mono small"}, f.function_key)) : null,
            el("tr", {}, el("th", {}, "resource"), el("td", {}, f.resource || "–")),
            el("tr", {}, el("th", {}, "lost"), el("td", {}, ms(f.lost_ms_per_iteration) + " per iteration, " +
                pct(f.lost_share) + " of iteration time" + (f.material ? "" : " (not material)"))),
            f.victims && f.victims.length ? el("tr", {}, el("th", {}, "victims"), el("td", {},
                ranks(f.victims) + (f.victims_wait_in ? " wait for it in " + f.victims_wait_in : ""))) : null)),
    evidence.length ? el("details", {open: index === 0 ? "" : null}, el("summary", {}, "evidence (" + evidence.length + ")"),
        el("table", {class: "kv evidence"}, el("tbody", {}, evidence))) : null,
    f.function_key ? el("p", {}, link("→ " + (f.function || "this function") + " on every worker",
        functionHash(job, windowId, f.function_key), {class: "drill"})) : null);
  }

  // Worker x function heat map: each cell is the worker's time per iteration in the
  // function, coloured by its ratio to the function's median over workers.
  function heatMap(job, windowId, summaries, culprits) {
    const fns = summaries.functions;
    const maxRows = 64;
    let workers = summaries.workers;
    let note = null;
    if (workers.length > maxRows) {
      const keep = workers.filter((w) => culprits.has(w.rank));
      const step = workers.length / (maxRows - keep.length);
      for (let i = 0; keep.length < maxRows && Math.floor(i) < workers.length; i += step) {
        if (!culprits.has(workers[Math.floor(i)].rank)) keep.push(workers[Math.floor(i)]);
      }
      keep.sort((a, b) => a.rank - b.rank);
      note = el("p", {class: "muted"}, "Showing " + keep.length + " of " + workers.length +
          " workers (the culprits and an even sample).");
      workers = keep;
    }
    const perIter = (w, row) => row[2] / Math.max(1, w.iterations);
    const cell = new Map();  // rank -> function index -> ms per iteration
    for (const w of summaries.workers) {
      const m = new Map();
      for (const row of w.functions) m.set(row[0], perIter(w, row));
      cell.set(w.rank, m);
    }
    const medians = fns.map((_, i) => median(summaries.workers.map((w) => cell.get(w.rank).get(i) ?? 0)));
    const head = el("tr", {}, el("th", {class: "corner"}, "rank \\ function"),
        fns.map((f) => el("th", {class: "fn", title: f.key},
            link(f.name, functionHash(job, windowId, f.key)))));
    const body = workers.map((w) => el("tr", {class: culprits.has(w.rank) ? "culprit" : null},
        el("th", {}, "rank " + w.rank),
        fns.map((f, i) => {
          const v = cell.get(w.rank).get(i);
          if (v === undefined) return el("td", {class: "empty"}, "");
          const ratio = medians[i] > 0 ? v / medians[i] : 1;
          return el("td", {title: f.name + " on rank " + w.rank + ": " + ms(v) + " per iteration, " +
              ratio.toFixed(2) + "x the median", style: {background: heatColor(ratio)}}, ms(v));
        })));
    return el("div", {class: "heatmap-box"}, note,
        el("table", {class: "heatmap", id: "heatmap"}, el("thead", {}, head), el("tbody", {}, body)));
  }
  function heatColor(ratio) {
    // 1x: white; slower: towards red; faster: towards blue. Saturates at 3x / 0.33x.
    const x = Math.max(-1, Math.min(1, Math.log(ratio) / Math.log(3)));
    if (x >= 0) return "rgb(255," + Math.round(255 - 170 * x) + "," + Math.round(255 - 190 * x) + ")";
    return "rgb(" + Math.round(255 + 150 * x) + "," + Math.round(255 + 90 * x) + ",255)";
  }

  async function diagnosisPage(job, windowId) {
    setCrumbs([["jobs", "#/"], [job, jobHash(job)], ["window " + windowId, null]]);
    const base = "/api/v1/jobs/" + encodeURIComponent(job) + "/windows/" + encodeURIComponent(windowId);
    const [d, summaries] = await Promise.all([api(base + "/diagnosis"),
      api(base + "/summaries?top=30").catch(() => null)]);
    const diag = d.diagnosis;
    const culprits = new Set();
    for (const f of diag.findings) if (f.material) for (const r of f.workers || []) culprits.add(r);
    const material = diag.findings.filter((f) => f.material);
    const others = diag.findings.filter((f) => !f.material);
    show(el("h1", {}, "Window " + windowId + " of ", link(job, jobHash(job), {class: "mono"})),
        el("p", {class: "verdict", id: "verdict"}, diag.verdict),
        el("p", {class: "muted"}, diag.num_workers + " workers · median iteration " + ms(diag.median_iteration_ms) +
            " · " + diag.findings.length + " findings (" + material.length + " material)" +
            (d.missing_ranks.length ? " · missing ranks: " + d.missing_ranks.join(", ") : "")),
        (diag.notes || []).length ? el("ul", {class: "notes"}, diag.notes.map((n) => el("li", {}, n))) : null,
        el("h2", {}, "Findings"),
        el("div", {id: "findings"}, material.map((f, i) => findingCard(job, windowId, f, i)),
            material.length === 0 ? el("p", {class: "muted"}, "No material finding" +
                // A minor finding that names some workers: they do not behave alike.
                (others.some((f) => (f.workers || []).length && new Set(f.workers).size < diag.num_workers)
                    ? ": the minor findings below cost the job little." : ": the workers behave alike.")) : null,
            others.length ? el("details", {}, el("summary", {}, others.length + " findings below the materiality threshold"),
                others.map((f, i) => findingCard(job, windowId, f, material.length + i))) : null),
        el("h2", {}, "Workers × functions"),
        summaries && summaries.functions.length
            ? [el("p", {class: "muted"}, "Time per iteration of the " + summaries.functions.length +
                " functions with the most time, on every worker; red: slower than the function's median " +
                "over workers, blue: faster. Click a function for its pattern on every worker."),
              heatMap(job, windowId, summaries, culprits)]
            : el("p", {class: "muted"}, "No summaries stored for this window."),
        el("h2", {}, "Report"),
        el("details", {}, el("summary", {}, "text report"), el("pre", {class: "report"}, d.text)));
  }

  // ---- one function on every worker ---------------------------------------------------

  function barChart(container, title, ranksX, values, highlight, fmt) {
    const colors = ranksX.map((r) => (highlight.has(r) ? "#d62728" : "#4c78a8"));
    const opts = {
      title: title,
      width: Math.max(360, Math.floor((container.clientWidth || 1200) / 3) - 16),
      height: 220,
      scales: {x: {time: false, range: (u, min, max) => [min - 0.75, max + 0.75]},
        y: {range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1]}},
      axes: [{label: "rank", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]},
        {size: 72, values: (u, vals) => vals.map((v) => fmt(v))}],
      legend: {show: false},
      cursor: {points: {show: false}},
      // The series draws no line: the draw hook paints one bar per rank.
      series: [{}, {label: title, paths: () => null, points: {show: false}}],
      hooks: {draw: [(u) => {
        // Paint each bar in its rank's colour (culprits in red).
        const ctx = u.ctx;
        ctx.save();
        const xs = u.data[0];
        const ys = u.data[1];
        const barW = Math.max(1, Math.min(40 * devicePixelRatio,
            0.8 * (u.valToPos(1, "x", true) - u.valToPos(0, "x", true))));
        for (let i = 0; i < xs.length; ++i) {
          if (ys[i] === null) continue;
          const x = u.valToPos(xs[i], "x", true);
          const y = u.valToPos(ys[i], "y", true);
          const y0 = u.valToPos(0, "y", true);
          ctx.fillStyle = colors[i];
          ctx.fillRect(x - barW / 2, y, barW, y0 - y);
        }
        ctx.restore();
      }]},
    };
    const chart = new uPlot(opts, [ranksX, values], container);
    charts.push(chart);
  }

  async function functionPage(job, windowId, key) {
    setCrumbs([["jobs", "#/"], [job, jobHash(job)], ["window " + windowId, windowHash(job, windowId)],
      ["function", null]]);
    const base = "/api/v1/jobs/" + encodeURIComponent(job) + "/windows/" + encodeURIComponent(windowId);
    const [s, d] = await Promise.all([
      api(base + "/summaries?function=" + encodeURIComponent(key)),
      api(base + "/diagnosis").catch(() => null)]);
    const fn = s.functions[0];
    const culprits = new Set();
    const related = [];
    if (d) {
      for (const f of d.diagnosis.findings) {
        if (f.function_key === key) {
          related.push(f);
          for (const r of f.workers || []) culprits.add(r);
        }
      }
    }
    const rows = [];
    for (const w of s.workers) {
      const row = w.functions[0];
      const it = Math.max(1, w.iterations);
      rows.push({rank: w.rank, host: w.host, count: row ? row[1] / it : null,
        time: row ? row[2] / it : null, p50: row ? row[3] : null, p99: row ? row[4] : null});
    }
    rows.sort((a, b) => a.rank - b.rank);
    const medTime = median(rows.map((r) => r.time ?? NaN));
    const box = el("div", {class: "bars"});
    const table = el("table", {class: "grid", id: "function-workers"},
        el("thead", {}, el("tr", {}, ["rank", "host", "calls / iter", "time / iter", "× median",
          "p50", "p99"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows.map((r) => el("tr", {class: culprits.has(r.rank) ? "culprit" : null,
          dataset: {rank: r.rank}},
        el("td", {class: "num"}, r.rank), el("td", {}, r.host),
        el("td", {class: "num"}, r.count === null ? "–" : r.count.toFixed(1)),
        el("td", {class: "num"}, ms(r.time)),
        el("td", {class: "num"}, r.time === null || !(medTime > 0) ? "–" : (r.time / medTime).toFixed(2) + "x"),
        el("td", {class: "num"}, ms(r.p50)), el("td", {class: "num"}, ms(r.p99))))));
    show(el("h1", {}, el("span", {class: "mono"}, fn.name), " on every worker"),
        el("p", {class: "mono small"}, fn.key),
        el("p", {class: "muted"}, fn.kind + " · window " + windowId + " · " + rows.length + " workers" +
            (culprits.size ? " · culprits in red" : "")),
        related.map((f) => el("p", {class: "related"}, el("span", {class: "code"}, f.code), " ", f.title)),
        box, table);
    const xs = rows.map((r) => r.rank);
    barChart(box, "time per iteration", xs, rows.map((r) => r.time), culprits, ms);
    barChart(box, "calls per iteration", xs, rows.map((r) => r.count), culprits, (v) => (v === null ? "–" : (+v).toFixed(1)));
    barChart(box, "p99 duration", xs, rows.map((r) => r.p99), culprits, ms);
  }

  window.addEventListener("hashchange", route);
  route();
})();
