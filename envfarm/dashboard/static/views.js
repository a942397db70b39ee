// envfarm dashboard: farm views (live run, trajectory browser, one episode).
"use strict";

const TIME_COLORS = {sandbox: "#7c3aed", policy: "#1f6feb", env: "#16a34a", queue: "#d97706", farm: "#9ca3af"};

function card(label, value, id, extra) {
  return h("div", {class: "card"}, h("div", {class: "card-label"}, label),
    h("div", {class: "card-value", id}, value), extra ? h("div", {class: "card-extra muted"}, extra) : null);
}

function badge(text, kind) {
  return h("span", {class: `badge badge-${kind || String(text).replace(/[^a-z_]/gi, "")}`}, text);
}

function secs(v) {
  if (v === null || v === undefined) return "–";
  if (v < 1) return `${(v * 1000).toFixed(0)} ms`;
  if (v < 120) return `${v.toFixed(1)} s`;
  return `${Math.floor(v / 60)} min ${Math.round(v % 60)} s`;
}

function when(unix) {
  return unix ? new Date(unix * 1000).toLocaleString() : "–";
}

function seriesPoints(s, key) {
  return (s.t || []).map((t, i) => [t, s[key][i]]);
}

// ------------------------------------------------------------------------------------------ live view

function renderFarm(main, src, d) {
  const spec = d.spec || {};
  const pct = d.total ? Math.min(100, 100 * d.done / d.total) : 0;
  const pool = d.pool;
  put(main,
    h("div", {class: "title-row"},
      h("h1", {}, spec.env_id || src.name), badge(d.state, d.state.replace(/ /g, "_")),
      h("a", {href: `#/farm/${src.id}/episodes`, class: "button", id: "open-trajectories"}, "Trajectories →")),
    h("p", {class: "muted"}, `${src.path} · policy ${spec.policy || "?"} · backend ${spec.backend || "?"} · run ${spec.run_id || "?"}`
      + (d.paused ? ` · paused: ${d.paused}` : "") + (d.stopped ? ` · stopped: ${d.stopped}` : "")),
    h("div", {class: "progress", title: `${pct.toFixed(1)}%`}, h("span", {style: `width:${pct}%`})),
    h("div", {class: "cards"},
      card("episodes done", `${d.done} / ${d.total}`, "farm-done", `${d.completed} completed`),
      card("active", String(d.active ?? 0), "farm-active", d.max_active ? `max ${d.max_active}` : null),
      card("steps/s", fmtNum(d.steps_per_s ?? 0, 1), "farm-steps-per-s", `${d.steps} steps`),
      card("mean reward", fmtNum(d.mean_reward, 3), "farm-reward", "completed episodes"),
      card("infra errors", String(d.infra_errors), "farm-infra", `${d.infra_retries} retried`),
      card("other errors", String(d.policy_errors + d.errors), "farm-errors",
        `${d.policy_errors} policy · ${d.errors} env · ${d.interrupted} interrupted`)),
    h("div", {class: "two-col"},
      h("section", {}, h("h2", {}, "Where the time goes"), splitBar(d.time_split || {}, TIME_COLORS),
        h("p", {class: "muted small"}, d.state === "running" ? "finished episodes plus the time so far of those in flight"
          : "over the finished episodes")),
      h("section", {}, h("h2", {}, "Sandbox pool"), poolView(pool, d))),
    d.nodes ? nodesView(d.nodes) : null,
    h("div", {class: "charts"},
      lineChart({title: "episodes done", series: [{name: "done", points: seriesPoints(d.series, "done")}], xLabel: "s", height: 150}),
      lineChart({title: "steps/s", series: [{name: "steps/s", points: seriesPoints(d.series, "steps_per_s"), color: "#16a34a"}], xLabel: "s", yMin: 0, height: 150}),
      lineChart({title: "mean reward (completed episodes)", series: [{name: "reward", points: seriesPoints(d.series, "reward_mean"), color: "#d97706"}], xLabel: "s", height: 150}),
      lineChart({title: "infra errors (cumulative)", series: [{name: "infra errors", points: seriesPoints(d.series, "infra_errors"), color: "#dc2626"}], xLabel: "s", yMin: 0, height: 150}),
      d.live_series.t.length > 1 ? lineChart({title: "in flight and sandbox pool (live.json, while watched)", series: [
        {name: "active episodes", points: seriesPoints(d.live_series, "active"), color: "#1f6feb"},
        {name: "leased sandboxes", points: seriesPoints(d.live_series, "leased"), color: "#7c3aed"},
        {name: "idle (warm)", points: seriesPoints(d.live_series, "idle"), color: "#16a34a"}], xLabel: "s", yMin: 0, height: 150, legend: true}) : null,
      d.live_series.t.length > 1 ? lineChart({title: "steps/s (live.json, last 5 s)", series: [
        {name: "steps/s", points: seriesPoints(d.live_series, "steps_per_s"), color: "#16a34a"}], xLabel: "s", yMin: 0, height: 150}) : null),
  );
}

function nodesView(nodes) {
  return h("section", {}, h("h2", {}, `Ray nodes (${nodes.length})`),
    h("table", {class: "grid-table", id: "nodes"}, h("thead", {}, h("tr", {},
      ["node", "slots", "episodes", "episodes/s", "steps/s", "requeued", "lost"].map((c) => h("th", {}, c)))),
      h("tbody", {}, nodes.map((n) => h("tr", {}, h("td", {class: "mono"}, `${n.hostname || n.address || n.node_id}${n.head ? " (head)" : ""}`),
        h("td", {}, String(n.slots)), h("td", {}, String(n.episodes)), h("td", {}, fmtNum(n.episodes_per_s, 2)),
        h("td", {}, fmtNum(n.steps_per_s, 1)), h("td", {}, String(n.requeued)), h("td", {class: "bad"}, n.lost || ""))))));
}

function poolView(pool, d) {
  if (!pool) {
    const why = d.nodes ? "each Ray node's worker keeps its own pool" : d.live_age_s === null
      ? "no live.json (the farm writes it while it runs)" : "no pool in this process yet";
    return h("p", {class: "muted", id: "pool"}, why);
  }
  const cap = pool.max_live || Math.max(1, pool.live);
  const seg = (n, color, name) => n > 0 ? h("span", {style: `width:${(100 * n / cap).toFixed(2)}%;background:${color}`, title: `${name} ${n}`}) : null;
  return h("div", {},
    h("div", {class: "split-bar"}, seg(pool.leased, "#1f6feb", "leased"), seg(pool.idle, "#16a34a", "idle"),
      seg(pool.starting, "#d97706", "starting"), seg(Math.max(0, pool.live - pool.leased - pool.idle - pool.starting), "#9ca3af", "closing")),
    h("table", {class: "kv compact", id: "pool"}, h("tbody", {},
      [[["leased", pool.leased], ["idle (warm target)", `${pool.idle} (${pool.size})`], ["starting", pool.starting]],
       [["live / cap", `${pool.live} / ${pool.max_live ?? "∞"}`], ["started", pool.started_total], ["leases", pool.leases_total]],
       [["start failures", pool.failed_total], ["expired leases", pool.expired_total]]]
        .map((row) => h("tr", {}, row.map(([k, v]) => [h("th", {}, k), h("td", {}, String(v))]))))));
}

// --------------------------------------------------------------------------------- trajectory browser

const FILTERS = ["env", "task", "status", "infra", "min_reward", "max_reward", "version"];
const savedFilters = {};  // run id -> the browser's filters, kept while the page is open

function renderBrowser(main, src, d, state) {
  if (!main.querySelector("#episode-filters")) {
    const sel = (name, options) => h("select", {name, onchange: () => refreshTable(main, src, state)},
      h("option", {value: ""}, "any"), options.map((o) => h("option", {value: o[0]}, o[1])));
    put(main,
      h("div", {class: "title-row"}, h("h1", {}, `Trajectories · ${(d.spec || {}).env_id || src.name}`),
        h("a", {href: `#/farm/${src.id}`, class: "button"}, "← live view")),
      h("form", {id: "episode-filters", class: "filters", onsubmit: (e) => { e.preventDefault(); refreshTable(main, src, state); }},
        h("label", {}, "env ", sel("env", (d.envs || []).map((e) => [e, e]))),
        h("label", {}, "task ", h("input", {name: "task", placeholder: "task id contains", oninput: () => refreshTable(main, src, state)})),
        h("label", {}, "status ", sel("status", ["completed", "infra_error", "policy_error", "error"].map((s) => [s, s]))),
        h("label", {}, "infra error ", sel("infra", [["yes", "yes"], ["no", "no"]])),
        h("label", {}, "reward ≥ ", h("input", {name: "min_reward", type: "number", step: "any", class: "num", oninput: () => refreshTable(main, src, state)})),
        h("label", {}, "≤ ", h("input", {name: "max_reward", type: "number", step: "any", class: "num", oninput: () => refreshTable(main, src, state)})),
        h("label", {}, "weight version ", sel("version", (d.versions || []).map((v) => [v, v])))),
      h("p", {class: "muted", id: "episode-count"}),
      h("table", {class: "grid-table", id: "episodes"}, h("thead", {}, h("tr", {},
        ["#", "task", "status", "reward", "steps", "tools called", "version", "finished"].map((c) => h("th", {}, c)))),
        h("tbody", {})));
  }
  if (state.lastDone === null) {
    const form = main.querySelector("#episode-filters");
    for (const [k, v] of Object.entries(savedFilters[src.id] || {})) if (form.elements[k]) form.elements[k].value = v;
  }
  if (state.lastDone !== d.done) { state.lastDone = d.done; refreshTable(main, src, state); }
}

async function refreshTable(main, src, state) {
  const form = main.querySelector("#episode-filters");
  if (!form) return;
  const q = new URLSearchParams();
  for (const f of FILTERS) { const v = form.elements[f].value; if (v !== "") q.set(f, v); }
  savedFilters[src.id] = Object.fromEntries(q);
  const my = ++state.seq;
  const data = await api(`/api/farm/${src.id}/episodes?${q}`);
  if (my !== state.seq || !document.body.contains(form)) return;
  main.querySelector("#episode-count").textContent = `${data.matched} of ${data.total} episodes match` +
    (data.matched > data.rows.length ? ` (newest ${data.rows.length} shown)` : "");
  main.querySelector("#episodes tbody").replaceChildren(...data.rows.map((r) =>
    h("tr", {class: "clickable", "data-index": r.index, onclick: () => { location.hash = `#/farm/${src.id}/episodes/${r.index}`; }},
      h("td", {}, h("a", {href: `#/farm/${src.id}/episodes/${r.index}`}, String(r.index))),
      h("td", {class: "mono"}, r.task_id), h("td", {}, badge(r.status), r.infra_error ? h("span", {class: "muted small"}, " " + r.infra_error.slice(0, 60)) : null),
      h("td", {}, fmtNum(r.reward, 3)), h("td", {}, String(r.steps)),
      h("td", {class: "mono small"}, r.tools.join(" → ")), h("td", {}, r.weight_version ?? "–"),
      h("td", {class: "small"}, when(r.finished_at)))));
}

// ----------------------------------------------------------------------------------------- one episode

function renderEpisode(main, src, t) {
  const cr = t.code_repair;
  const hasTokens = t.turns.some((x) => x.n_tokens > 0);
  put(main,
    h("div", {class: "title-row"}, h("h1", {}, `Episode ${t.index}`), badge(t.status),
      h("a", {href: `#/farm/${src.id}/episodes`, class: "button"}, "← trajectories")),
    h("table", {class: "kv"}, h("tbody", {}, [
      ["episode", t.episode_id], ["env", t.env_id], ["task", t.task_id], ["seed", t.seed],
      ["reward", fmtNum(t.reward, 3)], ["steps", t.turns.length], ["weight version", t.weight_version ?? "–"],
      ["policy", t.policy], ["retries", t.retries], ["started", when(t.started_at)],
      ["time", `${secs(t.timings.total_s)} (sandbox ${secs(t.timings.sandbox_s)}, policy ${secs(t.timings.policy_s)}, env ${secs(t.timings.env_s)}, queue ${secs(t.timings.queue_s)})`],
      t.infra_error ? ["infra error", t.infra_error] : null, t.error ? ["error", t.error] : null,
    ].filter(Boolean).map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {class: k === "infra error" || k === "error" ? "bad" : ""}, String(v)))))),
    cr ? codeRepair(cr) : null,
    h("h2", {}, "Transcript"),
    h("div", {class: "transcript", id: "transcript"}, t.messages.map(message)),
    h("h2", {}, "Tool calls"),
    h("table", {class: "grid-table", id: "tool-calls"}, h("thead", {}, h("tr", {},
      ["#", "tool", "arguments", "observation", "reward", "env", "policy", hasTokens ? "tokens (mean logprob)" : null]
        .filter(Boolean).map((c) => h("th", {}, c)))),
      h("tbody", {}, t.calls.map((c, i) => h("tr", {class: "tool-call-row"},
        h("td", {}, String(i + 1)), h("td", {class: "mono"}, c.tool || badge(c.error || "unparsed", "error")),
        h("td", {}, h("pre", {class: "small"}, c.arguments !== null ? JSON.stringify(c.arguments, null, 1) : c.action)),
        h("td", {}, h("pre", {class: "small observation"}, c.observation)), h("td", {}, fmtNum(c.reward, 3)),
        h("td", {class: "small"}, secs(t.turns[i].env_s)), h("td", {class: "small"}, secs(t.turns[i].policy_s)),
        hasTokens ? h("td", {class: "small"}, `${t.turns[i].n_tokens} (${fmtNum(t.turns[i].mean_logprob, 3)})`) : null)))),
    Object.keys(t.meta || {}).length ? h("details", {}, h("summary", {}, "meta (the env's final info)"),
      h("pre", {class: "small"}, JSON.stringify(t.meta, null, 2))) : null,
    h("details", {}, h("summary", {}, `tools offered (${t.tools.length})`),
      h("pre", {class: "small"}, JSON.stringify(t.tools, null, 2))),
  );
}

function message(m) {
  const calls = m.tool_calls || [];
  return h("div", {class: `msg msg-${m.role}`},
    h("div", {class: "msg-role"}, m.role + (m.tool_call_id ? ` · ${m.tool_call_id}` : "")),
    m.content ? h("pre", {class: "msg-content"}, typeof m.content === "string" ? m.content : JSON.stringify(m.content, null, 1)) : null,
    calls.map((c) => {
      const fn = c.function || {};
      let args = fn.arguments;
      try { args = JSON.stringify(JSON.parse(fn.arguments)); } catch (e) { /* shown as given */ }
      return h("div", {class: "tool-call", "data-tool": fn.name || ""}, h("span", {class: "tool-name"}, fn.name || "?"),
        h("code", {class: "tool-args"}, `(${args})`));
    }));
}

function codeRepair(cr) {
  const tests = cr.tests;
  const rows = [];
  if (tests) {
    for (const group of ["FAIL_TO_PASS", "PASS_TO_PASS"]) {
      for (const [res, ok] of [["success", true], ["failure", false]]) {
        for (const name of tests[group][res]) rows.push(h("tr", {}, h("td", {}, group), h("td", {class: "mono"}, name), h("td", {}, badge(ok ? "pass" : "fail"))));
      }
    }
  }
  const summary = (g) => tests ? `${tests[g].success.length}/${tests[g].success.length + tests[g].failure.length}` : "–";
  return h("section", {class: "code-repair", id: "code-repair"},
    h("h2", {}, "Code repair"),
    h("p", {}, cr.resolved === true ? badge("resolved") : cr.resolved === false ? badge("unresolved") : null,
      ` status ${cr.status || "–"} · FAIL_TO_PASS ${summary("FAIL_TO_PASS")} · PASS_TO_PASS ${summary("PASS_TO_PASS")}`,
      cr.error ? h("span", {class: "bad"}, ` · ${cr.error}`) : null),
    cr.findings.length ? h("div", {class: "findings"}, h("strong", {}, "Tamper rules fired: "),
      h("ul", {}, cr.findings.map((f) => h("li", {class: "mono"}, f)))) : null,
    tests ? h("table", {class: "grid-table", id: "tests"}, h("thead", {}, h("tr", {}, h("th", {}, "group"), h("th", {}, "test"), h("th", {}, "result"))), h("tbody", {}, rows)) : null,
    cr.patch !== null && cr.patch !== undefined ? h("div", {}, h("h3", {}, "Diff (graded)"), diffView(cr.patch)) : null,
    cr.test_logs.map((log, i) => h("details", {open: i === cr.test_logs.length - 1},
      h("summary", {}, `test log ${i + 1} (run_tests)`), h("pre", {class: "log"}, log))));
}

function diffView(text) {
  return h("pre", {class: "diff", id: "diff"}, (text || "(empty)").split("\n").map((line) => {
    const c = line.startsWith("+++") || line.startsWith("---") ? "diff-file" : line.startsWith("+") ? "diff-add"
      : line.startsWith("-") ? "diff-del" : line.startsWith("@@") ? "diff-hunk" : "";
    return h("span", {class: c}, line + "\n");
  }));
}
