// envfarm dashboard: routing, the sources sidebar, live updates (SSE), training and harness views.
"use strict";

const state = {sources: [], stream: null, route: null, browser: {seq: 0, lastDone: null}};
const SHOWN_PUBLISHES = 20;
const PHASE_COLORS = {sft: "#1f6feb", rl: "#d97706", sft_more: "#7c3aed"};
const ARM_COLORS = {sft: "#1f6feb", sft_more: "#7c3aed", rl: "#16a34a"};
const KIND_LABEL = {farm: "Farm runs", trainer: "Training", harness: "Harness"};

async function api(path) {
  const r = await fetch(path, {cache: "no-store"});
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
}

function setConn(text, ok) {
  const el = document.getElementById("conn");
  el.textContent = text;
  el.className = `conn ${ok ? "conn-ok" : "conn-off"}`;
}

// Live updates of one run: the server pushes its main view as `update` events whenever it changes.
function listen(id, onData) {
  stopListening();
  const es = new EventSource(`/api/events/${id}`);
  es.addEventListener("update", (ev) => { setConn("live", true); onData(JSON.parse(ev.data)); });
  es.onerror = () => setConn("reconnecting…", false);
  state.stream = es;
}

function stopListening() {
  if (state.stream) { state.stream.close(); state.stream = null; }
  setConn("", true);
}

async function loadSources() {
  state.sources = await api("/api/sources");
  const aside = document.getElementById("sources");
  const groups = ["farm", "trainer", "harness"].map((kind) => {
    const mine = state.sources.filter((s) => s.kind === kind);
    if (!mine.length) return null;
    return h("div", {class: "source-group"}, h("h3", {}, KIND_LABEL[kind]), h("ul", {}, mine.map((s) =>
      h("li", {}, h("a", {href: `#/${s.kind}/${s.id}`, class: location.hash.includes(s.id) ? "active" : "",
        title: s.path, "data-source": s.id}, s.name)))));
  });
  put(aside, ...groups.filter(Boolean));
}

function crumbs(...parts) {
  put(document.getElementById("crumbs"), parts.flatMap((p, i) =>
    [i ? h("span", {class: "sep"}, "/") : null, p[1] ? h("a", {href: p[1]}, p[0]) : h("span", {}, p[0])]));
}

async function route() {
  const main = document.getElementById("main");
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  const key = parts.join("/");
  if (key === state.route) return;
  state.route = key;
  stopListening();
  if (!state.sources.length || (parts[1] && !state.sources.find((s) => s.id === parts[1]))) await loadSources();
  else document.querySelectorAll("#sources a").forEach((a) =>
    a.classList.toggle("active", a.dataset.source === parts[1]));
  const src = state.sources.find((s) => s.id === parts[1]);
  put(main, h("p", {class: "muted"}, "loading…"));
  try {
    if (!parts.length) return overview(main);
    if (!src) { crumbs(["runs", "#/"]); return put(main, h("p", {class: "bad"}, "No such run; pick one on the left.")); }
    const top = [src.name, `#/${src.kind}/${src.id}`];
    if (src.kind === "farm" && parts[2] === "episodes" && parts[3] !== undefined) {
      crumbs(["runs", "#/"], top, ["trajectories", `#/farm/${src.id}/episodes`], [`episode ${parts[3]}`]);
      return renderEpisode(main, src, await api(`/api/farm/${src.id}/episodes/${parts[3]}`));
    }
    if (src.kind === "farm" && parts[2] === "episodes") {
      crumbs(["runs", "#/"], top, ["trajectories"]);
      state.browser = {seq: 0, lastDone: null};
      put(main);
      return listen(src.id, (d) => renderBrowser(main, src, d, state.browser));
    }
    if (src.kind === "harness" && parts[2] !== undefined) {
      crumbs(["runs", "#/"], top, [parts[2]]);
      return renderInstance(main, src, await api(`/api/harness/${src.id}/instances/${encodeURIComponent(parts[2])}`));
    }
    crumbs(["runs", "#/"], [src.name]);
    const render = {farm: renderFarm, trainer: renderTrainer, harness: renderHarness}[src.kind];
    listen(src.id, (d) => render(main, src, d));
  } catch (e) {
    put(main, h("p", {class: "bad"}, String(e.message || e)));
  }
}

async function overview(main) {
  crumbs(["runs"]);
  await loadSources();
  const rows = await Promise.all(state.sources.map(async (s) => [s, await api(`/api/view/${s.id}`)]));
  const line = ([s, d]) => {
    let what = "";
    if (s.kind === "farm") what = `${(d.spec || {}).env_id || ""} · ${d.done}/${d.total} episodes · ${d.state} · mean reward ${fmtNum(d.mean_reward, 3)} · ${d.infra_errors} infra errors`;
    if (s.kind === "trainer") what = `${d.n_updates} updates · ${d.publishes.length} publishes · ${d.evals.length} evals`;
    if (s.kind === "harness") what = Object.entries(d.counts).map(([k, v]) => `${v} ${k}`).join(" · ") || "no instances yet";
    return h("tr", {class: "clickable", onclick: () => { location.hash = `#/${s.kind}/${s.id}`; }},
      h("td", {}, badge(s.kind)), h("td", {}, h("a", {href: `#/${s.kind}/${s.id}`}, s.name)), h("td", {}, what),
      h("td", {class: "muted small"}, s.path));
  };
  put(main, h("h1", {}, "Runs"), rows.length ? h("table", {class: "grid-table", id: "runs"},
    h("tbody", {}, rows.map(line))) : h("p", {class: "muted"}, "No runs found."));
}

// --------------------------------------------------------------------------------------- training view

function renderTrainer(main, src, d) {
  const u = d.updates || [], last = d.last || {};
  const pts = (key, phase) => u.filter((x) => !phase || x.phase === phase).map((x) => [x.step, x[key] ?? (x.extra || {})[key] ?? null]);
  const phases = [...new Set(u.map((x) => x.phase).filter(Boolean))];
  const byPhase = (key) => (phases.length ? phases : [null]).map((p) => ({name: p || key, points: pts(key, p), color: PHASE_COLORS[p]}));
  const pubs = d.publishes || [], t0 = Math.min(...pubs.map((p) => p.time ?? Infinity), ...u.map((x) => x.time ?? Infinity));
  const evals = d.evals || [], arms = d.arms || {}, diffs = d.diffs || {};
  // the headline: RL minus the strongest baseline evaluated (sft_more, else sft), sampled, else greedy
  const headName = diffs.rl_minus_sft_more ? "rl_minus_sft_more" : "rl_minus_sft", headDiffs = diffs[headName] || {};
  const headMode = headDiffs.sampled ? "sampled" : "greedy", head = headDiffs[headMode];
  put(main,
    h("div", {class: "title-row"}, h("h1", {}, `Training · ${src.name}`)),
    h("p", {class: "muted"}, src.path),
    trainerRuns(src),
    h("div", {class: "cards"},
      card("updates", String(d.n_updates), "train-updates", last.phase ? `phase ${last.phase}` : null),
      card("step", last.step ?? "–", "train-step", last.time ? when(last.time) : null),
      card("loss", fmtNum(last.loss), "train-loss", last.lr !== undefined ? `lr ${fmtNum(last.lr)}` : null),
      card("reward (batch)", fmtNum(last.reward_mean, 3), "train-reward", last.kl !== null && last.kl !== undefined ? `kl ${fmtNum(last.kl)}` : null),
      card("weight version", last.version ?? "–", "train-version", `${(d.publishes || []).length} published`),
      card(head ? `${headName.replaceAll("_", " ").replace("minus", "−")} (${headMode})` : "RL − baseline", head ? fmtNum(head.diff, 3) : "–", "train-eval-diff",
        head && head.ci95 ? `95% CI [${fmtNum(head.ci95[0], 3)}, ${fmtNum(head.ci95[1], 3)}]` : null)),
    h("div", {class: "charts"},
      // each phase counts its own steps (SFT 1..n, then RL 1..m): one loss chart per phase
      (phases.length ? phases : [null]).map((p) => lineChart({title: p ? `loss · ${p}` : "loss",
        series: [{name: "loss", points: pts("loss", p), color: PHASE_COLORS[p]}], xLabel: "step"})),
      lineChart({title: "reward (batch mean)", series: byPhase("reward_mean"), xLabel: "step", empty: "no rewards yet (SFT has none)"}),
      lineChart({title: "KL / clip fraction", series: [{name: "kl", points: pts("kl")}, {name: "clip_frac", points: pts("clip_frac")}], xLabel: "step", legend: true, empty: "no KL or clipping recorded"}),
      lineChart({title: "learning rate", series: byPhase("lr"), xLabel: "step", legend: phases.length > 1}),
      extraKeys(u).map((k) => lineChart({title: k, series: byPhase(k), xLabel: "step", legend: phases.length > 1})),
      lineChart({title: "weight versions published", series: [{name: "version", points: pubs.filter((p) => p.time).map((p) => [(p.time - t0) / 60, p.version]), color: "#7c3aed"}],
        xLabel: "min", yMin: 0, empty: "no weights published yet"}),
      ["greedy", "sampled"].map((mode) => barChart({title: `arms · ${mode} (95% CI)`,
        bars: Object.entries(arms).filter(([, m]) => m[mode]).map(([arm, m]) => ({label: arm, value: m[mode].mean, color: ARM_COLORS[arm],
          lo: m[mode].ci95 ? m[mode].ci95[0] : null, hi: m[mode].ci95 ? m[mode].ci95[1] : undefined}))}))),
    h("h2", {}, "Arms"),
    armsTable(arms, diffs),
    h("h2", {}, "Evaluations"),
    evals.length ? h("table", {class: "grid-table", id: "evals"}, h("thead", {}, h("tr", {}, ["phase", "mean reward", "episodes", "time"].map((c) => h("th", {}, c)))),
      h("tbody", {}, evals.map((e) => h("tr", {}, h("td", {}, e.phase ?? "–"), h("td", {}, fmtNum(e.mean_reward, 4)), h("td", {}, e.episodes ?? "–"), h("td", {}, when(e.time))))))
      : h("p", {class: "muted"}, "no eval records yet"),
    h("h2", {}, "Weight versions published"),
    (d.publishes || []).length ? h("table", {class: "grid-table", id: "publishes"}, h("thead", {}, h("tr", {}, ["version", "published", "size", "took"].map((c) => h("th", {}, c)))),
      h("tbody", {}, d.publishes.slice(-SHOWN_PUBLISHES).reverse().map((p) => h("tr", {}, h("td", {}, `v${p.version}`), h("td", {}, when(p.time)),
        h("td", {}, p.bytes !== null && p.bytes !== undefined ? `${(p.bytes / 1048576).toFixed(2)} MiB` : "–"), h("td", {}, secs(p.seconds))))))
      : h("p", {class: "muted"}, "no weights published yet"),
    d.publishes.length > SHOWN_PUBLISHES ? h("p", {class: "muted small"}, `newest ${SHOWN_PUBLISHES} shown; ${d.publishes.length - SHOWN_PUBLISHES} earlier`) : null,
    d.summary ? h("details", {}, h("summary", {}, "summary.json"), h("pre", {class: "small"}, JSON.stringify(d.summary, null, 2))) : null,
    d.unknown_kinds.length || d.bad_lines ? h("p", {class: "muted small"}, `ignored: ${d.unknown_kinds.join(", ")} ${d.bad_lines ? `${d.bad_lines} unreadable lines` : ""}`) : null,
  );
}

// The three arms (rows) by evaluation mode (columns): mean [95% CI] and episodes; then RL minus each baseline.
function armsTable(arms, diffs) {
  const names = Object.keys(arms);
  if (!names.length) return h("p", {class: "muted"}, "no arm evaluated yet");
  const modes = ["greedy", "sampled"];
  const ci = (x) => (x && x.ci95 ? ` [${fmtNum(x.ci95[0], 3)}, ${fmtNum(x.ci95[1], 3)}]` : "");
  const score = (x) => (x ? `${fmtNum(x.mean, 3)}${ci(x)} · ${x.episodes ?? "–"} eps` : "–");
  const diff = (x) => (x ? `${x.diff >= 0 ? "+" : ""}${fmtNum(x.diff, 3)}${ci(x)}` : "–");
  return h("table", {class: "grid-table", id: "arms"},
    h("thead", {}, h("tr", {}, ["arm", ...modes].map((c) => h("th", {}, c)))),
    h("tbody", {}, names.map((arm) => h("tr", {}, h("td", {}, arm), modes.map((m) => h("td", {}, score(arms[arm][m]))))),
      Object.entries(diffs).map(([name, d]) => h("tr", {class: "diff"}, h("td", {}, name.replaceAll("_", " ").replace("minus", "−")),
        modes.map((m) => h("td", {}, diff(d[m])))))));
}

// Extra numeric keys of the update records (at most four charts), in order of first appearance.
function extraKeys(updates) {
  const keys = [];
  for (const x of updates) for (const k of Object.keys(x.extra || {})) if (!keys.includes(k)) keys.push(k);
  return keys.slice(0, 4);
}

// The trainer's farm runs (DIR/runs/<phase>: demos, evaluations, RL rollouts), linked.
function trainerRuns(src) {
  const mine = state.sources.filter((s) => s.kind === "farm" && s.path.startsWith(`${src.path}/runs/`));
  if (!mine.length) return null;
  return h("p", {class: "small", id: "trainer-runs"}, "farm runs: ", mine.map((s, i) =>
    [i ? " · " : null, h("a", {href: `#/farm/${s.id}`}, s.path.slice(src.path.length + 6))]));
}

// ---------------------------------------------------------------------------------------- harness view

function renderHarness(main, src, d) {
  const s = d.summary;
  const ci = s && s.resolved_rate_ci95;
  const ratio = (p) => (p ? `${p[0]}/${p[1]}` : "–");
  put(main,
    h("div", {class: "title-row"}, h("h1", {}, `Harness · ${d.run_id}`), h("span", {class: "muted"}, d.model)),
    h("p", {class: "muted"}, d.path),
    h("div", {class: "cards"},
      card("resolved", s ? `${s.resolved_instances} / ${s.total_instances}` : String(d.counts.resolved || 0), "harness-resolved",
        s ? `${(100 * s.resolved_rate).toFixed(1)}% (95% CI ${(100 * ci[0]).toFixed(1)}–${(100 * ci[1]).toFixed(1)}%)` : "run summary not written yet"),
      card("unresolved", String(d.counts.unresolved || 0), "harness-unresolved", s ? `${s.partial_ids.length} partial` : null),
      card("errors", String(d.counts.error || 0), "harness-errors", s ? `${s.infra_error_ids.length} infra · ${s.timeout_ids.length} timeout` : null),
      card("tampering", String(s ? Object.keys(s.tampered_ids).length : d.rows.filter((r) => r.tamper.length).length), "harness-tampered", "a rule fired"),
      card("empty / running", `${d.counts.empty_patch || 0} / ${d.counts.running || 0}`, "harness-other", null)),
    h("table", {class: "grid-table", id: "harness-instances"}, h("thead", {}, h("tr", {},
      ["instance", "outcome", "status", "FAIL_TO_PASS", "PASS_TO_PASS", "tamper rule", "suspect", "error", "time"].map((c) => h("th", {}, c)))),
      h("tbody", {}, d.rows.map((r) => h("tr", {class: "clickable", "data-instance": r.instance_id,
        onclick: () => { location.hash = `#/harness/${src.id}/${encodeURIComponent(r.instance_id)}`; }},
        h("td", {class: "mono"}, h("a", {href: `#/harness/${src.id}/${encodeURIComponent(r.instance_id)}`}, r.instance_id)),
        h("td", {}, badge(r.outcome)), h("td", {}, r.status || "–"), h("td", {}, ratio(r.f2p)), h("td", {}, ratio(r.p2p)),
        h("td", {}, r.tamper.map((t) => h("span", {class: "rule", title: d.rules[t] || ""}, t))),
        h("td", {}, (r.suspect || []).map((t) => h("span", {class: "rule", title: d.rules[t] || ""}, t))),
        h("td", {class: "small bad"}, r.error_kind ? `${r.error_kind}: ${r.error || ""}` : (r.error || "")),
        h("td", {class: "small"}, r.duration_s !== undefined ? secs(r.duration_s) : "–"))))),
  );
}

function renderInstance(main, src, d) {
  const r = d.row;
  put(main,
    h("div", {class: "title-row"}, h("h1", {}, d.instance_id), badge(r.outcome),
      h("a", {href: `#/harness/${src.id}`, class: "button"}, "← all instances")),
    h("table", {class: "kv"}, h("tbody", {}, [["status", r.status], ["FAIL_TO_PASS", r.f2p ? `${r.f2p[0]}/${r.f2p[1]} pass` : "–"],
      ["PASS_TO_PASS", r.p2p ? `${r.p2p[0]}/${r.p2p[1]} pass` : "–"], ["attempts", r.attempts], ["time", secs(r.duration_s)],
      r.error ? ["error", `${r.error_kind || ""} ${r.error}`] : null].filter(Boolean).map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, String(v ?? "–")))))),
    h("h2", {}, "Tamper rules"),
    d.findings.length ? h("table", {class: "grid-table", id: "findings"}, h("thead", {}, h("tr", {}, ["rule", "path", "action", "detail", "what the rule guards"].map((c) => h("th", {}, c)))),
      h("tbody", {}, d.findings.map((f) => h("tr", {}, h("td", {}, h("span", {class: "rule"}, f.rule)), h("td", {class: "mono"}, f.path),
        h("td", {}, badge(f.action)), h("td", {class: "small"}, f.detail), h("td", {class: "small muted"}, f.rule_text)))))
      : h("p", {class: "muted"}, "No rule fired."),
    h("h2", {}, d.suspect ? "Suspect (static screening)" : "Static screening"),
    d.suspicions.length ? h("table", {class: "grid-table", id: "suspicions"}, h("thead", {}, h("tr", {}, ["rule", "path", "line", "detail", "what the rule looks for"].map((c) => h("th", {}, c)))),
      h("tbody", {}, d.suspicions.map((x) => h("tr", {}, h("td", {}, h("span", {class: "rule"}, x.rule)), h("td", {class: "mono"}, x.path),
        h("td", {}, x.line ? String(x.line) : "–"), h("td", {class: "small"}, x.detail), h("td", {class: "small muted"}, x.rule_text)))))
      : h("p", {class: "muted"}, "Not suspect."),
    h("h2", {}, "Logs"),
    Object.entries(d.logs).map(([name, text], i) => h("details", {open: i === 0 || name === "test_output.txt", "data-log": name},
      h("summary", {}, name), name.endsWith(".diff") ? diffView(text) : h("pre", {class: "log"}, text))),
    d.report ? h("details", {}, h("summary", {}, "report.json"), h("pre", {class: "small"}, JSON.stringify(d.report, null, 2))) : null,
  );
}

window.addEventListener("hashchange", () => route());
window.addEventListener("DOMContentLoaded", () => {
  route();
  setInterval(() => { loadSources().catch(() => setConn("server unreachable", false)); }, 10000);
});
