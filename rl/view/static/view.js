// ragym view: episode list with filters, one episode turn by turn, its tokens, a question across steps.
// Data come from data/index.js (window.RAGYM_INDEX) and data/ep/<id>.js (window.RAGYM_EP[id]), loaded as
// scripts so an exported folder works from file:// as well as from the local server.
"use strict";

const INDEX = window.RAGYM_INDEX;
const ROWS = INDEX.episodes;
const state = { filters: {}, sort: "id", asc: true };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "on") for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
    else if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const fmt = (v) => (v === null || v === undefined ? "" : typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(3)) : String(v));
const uniq = (values) => [...new Set(values)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
const numericId = (id) => Number(id.slice(1));

// ----- list ---------------------------------------------------------------------------------------
const FILTERS = [
  { key: "step", label: "step", options: () => uniq(ROWS.map((r) => r.step)), test: (r, v) => String(r.step) === v },
  { key: "phase", label: "phase", options: () => uniq(ROWS.map((r) => r.phase)), test: (r, v) => r.phase === v },
  { key: "data_source", label: "data source", options: () => uniq(ROWS.map((r) => r.data_source)), test: (r, v) => r.data_source === v },
  { key: "action", label: "action kind", options: () => uniq(ROWS.flatMap((r) => r.actions)), test: (r, v) => r.actions.includes(v) },
  { key: "tag", label: "has event", options: () => INDEX.tags.map(([t]) => t), labels: Object.fromEntries(INDEX.tags.map(([t, n]) => [t, `${t} (${n})`])), test: (r, v) => r.tags.includes(v) },
  { key: "truncated", label: "truncated", options: () => ["yes", "no"], test: (r, v) => r.truncated === (v === "yes") },
  { key: "format_errors", label: "format errors", options: () => ["yes", "no"], test: (r, v) => (r.format_errors > 0) === (v === "yes") },
  { key: "issues", label: "token issues", options: () => ["yes", "no"], test: (r, v) => (r.token_issues.length > 0) === (v === "yes") },
];

const COLUMNS = [
  ["id", "id", (r) => r.id, (r) => numericId(r.id)],
  ["step", "step", (r) => r.step],
  ["phase", "phase", (r) => r.phase],
  ["data_source", "data source", (r) => r.data_source],
  ["question", "question", (r) => r.question],
  ["reward", "reward", (r) => fmt(r.reward), (r) => r.reward ?? -Infinity],
  ...INDEX.terms.map((t) => [`term:${t}`, t, (r) => fmt(r.terms[t]), (r) => r.terms[t] ?? -Infinity]),
  ["advantage", "adv.", (r) => fmt(r.advantage), (r) => r.advantage ?? -Infinity],
  ["num_turns", "turns", (r) => r.num_turns],
  ["actions", "actions", (r) => r.actions.join(" \u203a ")],
  ["num_tokens", "tokens", (r) => r.num_tokens],
  ["truncated", "trunc.", (r) => (r.truncated ? "yes" : "")],
  ["staleness", "stale", (r) => r.staleness ?? "", (r) => r.staleness ?? -Infinity],
  ["format_errors", "fmt err.", (r) => r.format_errors || ""],
  ["token_issues", "issues", (r) => r.token_issues.join("; "), (r) => r.token_issues.length],
];

function passes(row) {
  const f = state.filters;
  for (const filter of FILTERS) if (f[filter.key] && !filter.test(row, f[filter.key])) return false;
  if (f.rmin !== undefined && f.rmin !== "" && !(row.reward >= Number(f.rmin))) return false;
  if (f.rmax !== undefined && f.rmax !== "" && !(row.reward <= Number(f.rmax))) return false;
  return true;
}

function sortedRows(rows) {
  const column = COLUMNS.find((c) => c[0] === state.sort) || COLUMNS[0];
  const key = column[3] || column[2];
  const out = [...rows].sort((a, b) => {
    const x = key(a), y = key(b);
    return x < y ? -1 : x > y ? 1 : numericId(a.id) - numericId(b.id);
  });
  return state.asc ? out : out.reverse();
}

function filterBar(rerender) {
  const bar = el("div", { class: "filters" });
  for (const filter of FILTERS) {
    const labels = filter.labels || {};
    const select = el("select", { id: `f-${filter.key}`, on: { change: (e) => { state.filters[filter.key] = e.target.value; rerender(); } } },
      el("option", { value: "" }, "any"),
      filter.options().map((o) => el("option", { value: String(o) }, labels[o] || String(o))));
    select.value = state.filters[filter.key] || "";
    bar.append(el("label", {}, `${filter.label} `, select));
  }
  for (const [key, label] of [["rmin", "reward \u2265"], ["rmax", "reward \u2264"]]) {
    const input = el("input", { type: "number", step: "any", id: `f-${key}`, on: { input: (e) => { state.filters[key] = e.target.value; rerender(); } } });
    input.value = state.filters[key] || "";
    bar.append(el("label", {}, `${label} `, input));
  }
  return bar;
}

function listView(app) {
  const table = el("table", { id: "episodes" });
  const count = el("div", { id: "count" });
  function rerender() {
    const rows = sortedRows(ROWS.filter(passes));
    count.textContent = `${rows.length} of ${ROWS.length} episodes`;
    const head = el("tr", {}, COLUMNS.map(([key, title]) => el("th", {
      class: state.sort === key ? `sorted${state.asc ? " asc" : ""}` : null, "data-key": key,
      on: { click: () => { state.asc = state.sort === key ? !state.asc : true; state.sort = key; rerender(); } },
    }, title)));
    const body = rows.map((r) => el("tr", { class: "ep", "data-id": r.id, on: { click: () => (location.hash = `#/ep/${r.id}`) } },
      COLUMNS.map(([key, , show]) => el("td", { class: ["reward", "advantage", "num_turns", "num_tokens"].includes(key) || key.startsWith("term:") ? "num" : (key === "token_issues" ? "warn" : null) }, show(r)))));
    table.replaceChildren(el("thead", {}, head), el("tbody", {}, body));
  }
  // Collapse-guard firings of the run (guards.jsonl): which guard, at which step, the numbers.
  const guards = (INDEX.guards || []).length ? el("ul", { id: "guards", class: "warn" }, INDEX.guards.map((g) => el("li", {}, g))) : "";
  app.replaceChildren(guards, filterBar(rerender), count, table);
  rerender();
}

// ----- one episode --------------------------------------------------------------------------------
function loadEpisode(id, done) {
  if (window.RAGYM_EP && window.RAGYM_EP[id]) return done(window.RAGYM_EP[id]);
  const script = el("script", { src: `data/ep/${id}.js` });
  script.onload = () => done(window.RAGYM_EP[id]);
  script.onerror = () => done(null);
  document.body.append(script);
}

function observation(segments) {
  if (!segments) return null;
  return el("div", { class: "obs" }, segments.map((s) =>
    s.image ? el("img", { src: `images/${s.image}.png`, alt: `image ${s.image}`, "data-key": s.image }) : el("span", { class: "otext" }, s.text)));
}

function value(v, gold) {
  const isGold = (x) => gold.includes(x);
  if (Array.isArray(v)) return ["[", v.map((x, i) => [i ? ", " : "", isGold(x) ? el("span", { class: "gold", title: "gold" }, `\u2605${x}`) : JSON.stringify(x)]), "]"];
  if (isGold(v)) return el("span", { class: "gold", title: "gold" }, `\u2605${v}`);
  return typeof v === "object" && v !== null ? JSON.stringify(v) : JSON.stringify(v);
}

function eventRow(event) {
  const gold = event._gold || [];
  const fields = Object.entries(event).filter(([k]) => !["type", "turn", "_gold"].includes(k));
  return el("div", { class: "event", "data-type": event.type }, el("span", { class: "type" }, event.type),
    fields.map(([k, v]) => [el("span", { class: "key" }, `${k}=`), value(v, gold), " "]));
}

function tokenView(spans) {
  if (!spans) return el("p", {}, "No tokens recorded for this episode (only training and eval traces carry them).");
  const maxAdv = Math.max(1e-9, ...spans.flatMap((s) => (s.tokens || []).map((t) => Math.abs(t[2] || 0))));
  const box = el("div", { class: "tokens", id: "tokens" });
  for (const span of spans) {
    if (span.kind === "image") {
      box.append(el("span", { class: `imgspan${span.bad ? " bad" : ""}`, title: `tokens ${span.start}-${span.end - 1}${span.bad ? " (mask 1!)" : ""}` }, `[image \u00d7${span.count}]`));
      continue;
    }
    const group = el("span", { class: `span ${span.kind}`, "data-kind": span.kind });
    for (const [id, text, adv] of span.tokens) {
      const tok = el("span", { class: `tok ${span.kind}`, title: `id ${id} ${JSON.stringify(text)} mask ${span.kind === "gen" ? 1 : 0}${adv === null ? "" : ` adv ${adv}`}` }, text);
      if (span.kind === "gen" && adv !== null) {
        const a = Math.min(1, Math.abs(adv) / maxAdv) * 0.45;
        tok.style.background = adv >= 0 ? `rgba(46,125,50,${a})` : `rgba(198,40,40,${a})`;
      }
      group.append(tok);
    }
    box.append(group);
  }
  const legend = el("div", { class: "legend" }, el("span", { class: "tok prompt" }, "prompt"), el("span", { class: "tok gen" }, "mask 1 (generated; shade = advantage)"),
    el("span", { class: "tok ctx" }, "mask 0 (observation)"), el("span", { class: "imgspan" }, "image placeholders"), el("span", { class: "imgspan bad" }, "placeholder with mask 1"));
  return el("div", {}, legend, box);
}

function episodeView(app, id) {
  app.replaceChildren("loading...");
  loadEpisode(id, (ep) => {
    if (!ep) return app.replaceChildren(`no episode ${id}`);
    const s = ep.summary;
    const terms = el("table", { class: "terms", id: "terms" },
      Object.entries(s.terms).map(([k, v]) => el("tr", { "data-term": k }, el("td", {}, k), el("td", { class: "num" }, fmt(v)))),
      el("tr", {}, el("td", {}, el("b", {}, "total")), el("td", { class: "num" }, el("b", {}, fmt(s.reward)))));
    const head = el("div", { class: "card" },
      el("h2", {}, `${s.id}: ${s.phase} step ${s.step}, ${s.data_source}${s.env_id ? ` (${s.env_id})` : ""}`),
      el("a", { href: `#/q/${encodeURIComponent(s.question)}`, id: "question-link" }, `question ${s.question} across steps`),
      el("p", {}, `source ${s.source}; group ${s.group}; ${s.num_turns} turns; truncated: ${s.truncated}; format errors: ${s.format_errors}` +
        (s.staleness == null ? "" : `; weights v${s.weight_versions.join("-v")}, ${s.staleness} update(s) old when trained`) +
        (s.retriever_versions && s.retriever_versions.length ? `; retriever ${s.retriever_versions.join(", ")}` : "")),
      s.token_issues.length ? el("p", { class: "warn" }, s.token_issues.join("; ")) : null,
      el("h3", {}, "reward by term"), terms,
      el("h3", {}, "ground truth"), el("pre", {}, JSON.stringify(ep.ground_truth)));
    const task = el("div", { class: "card turn", "data-turn": "-1" }, el("h3", {}, "task"), observation(ep.task.observation), ep.task.events.map(eventRow));
    const turns = ep.turns.map((t) => el("div", { class: "card turn", "data-turn": t.turn },
      el("h3", {}, `turn ${t.turn}`), el("pre", { class: "policy" }, t.text),
      t.events.map(eventRow), t.observation ? [el("div", { class: "key" }, "observation"), observation(t.observation)] : null));
    const tokens = el("div", { class: "card" }, el("h3", {}, "tokens as the trainer saw them"), tokenView(ep.spans));
    app.replaceChildren(head, task, ...turns, tokens);
  });
}

// ----- a question across steps --------------------------------------------------------------------
function questionView(app, key) {
  const rows = ROWS.filter((r) => r.question === key);
  const byStep = new Map();
  for (const r of rows) {
    const k = `${r.phase} step ${r.step}`;
    if (!byStep.has(k)) byStep.set(k, []);
    byStep.get(k).push(r);
  }
  const table = el("table", { id: "steps" }, el("tr", {}, el("th", {}, "step"), el("th", {}, "mean reward"), el("th", {}, "episodes (reward: actions)")),
    [...byStep.entries()].map(([k, eps]) => el("tr", { class: "steprow" }, el("td", {}, k),
      el("td", { class: "num" }, fmt(eps.reduce((a, r) => a + (r.reward || 0), 0) / eps.length)),
      el("td", {}, eps.map((r) => el("a", { class: "mini", href: `#/ep/${r.id}` }, `${fmt(r.reward)}: ${r.actions.join(" \u203a ") || "(no actions)"}`))))));
  app.replaceChildren(el("h2", {}, `question ${key}: ${rows.length} episodes`), table);
}

function route() {
  const app = document.getElementById("app");
  const hash = decodeURIComponent(location.hash.slice(1));
  if (hash.startsWith("/ep/")) return episodeView(app, hash.slice(4));
  if (hash.startsWith("/q/")) return questionView(app, hash.slice(3));
  listView(app);
}

document.getElementById("title").textContent = INDEX.title;
window.addEventListener("hashchange", route);
route();
