// The ferry console: a page per hash route, each reading the JSON endpoints scripts call too
// (through /console/api/<path>, signed in by the session cookie). Nothing shown is computed
// here but layout; every ledger string goes into the page as text (textContent), never markup.
"use strict";

const state = { session: null, csrf: "" };

// ---- helpers ------------------------------------------------------------------------------

function $(id) { return document.getElementById(id); }

function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return e;
}

async function api(path, options) {
  const opts = Object.assign({ method: "GET", credentials: "same-origin" }, options || {});
  opts.headers = Object.assign({}, opts.headers || {});
  if (opts.method !== "GET") opts.headers["x-ferry-csrf"] = state.csrf;
  const res = await fetch("/console/api" + path, opts);
  const type = res.headers.get("content-type") || "";
  const body = type.startsWith("application/json") ? await res.json() : await res.text();
  if (res.status === 401 && path !== "/session") { showSignIn(); }
  return { status: res.status, ok: res.ok, body };
}

function errorText(r) {
  if (r.body && r.body.error && r.body.error.message) return r.body.error.message;
  return "HTTP " + r.status;
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== undefined && v !== null) q.set(k, v);
  const s = q.toString();
  return s ? "?" + s : "";
}

function table(columns, rows, opts) {
  const head = h("tr", {}, columns.map((c) => h("th", { class: c.num ? "num" : "" }, c.title)));
  const body = rows.map((r) => {
    const tr = h("tr", { class: opts && opts.onclick ? "clickable" : "" },
      columns.map((c) => h("td", { class: c.num ? "num" : "", "data-col": c.key },
                              c.render ? c.render(r) : String(r[c.key] ?? ""))));
    if (opts && opts.onclick) tr.addEventListener("click", () => opts.onclick(r));
    return tr;
  });
  const t = h("table", { id: opts && opts.id }, h("thead", {}, head), h("tbody", {}, body));
  if (opts && opts.total) {
    t.appendChild(h("tfoot", {}, h("tr", { class: "total" },
      columns.map((c) => h("td", { class: c.num ? "num" : "", "data-col": c.key },
                              opts.total[c.key] === undefined ? "" : String(opts.total[c.key]))))));
  }
  return t;
}

function card(label, value, id) {
  return h("div", { class: "card" }, h("div", { class: "label" }, label),
           h("div", { class: "value", id }, value));
}

function csvLink(path, label) {
  return h("a", { href: "/console/api" + path, download: "", class: "csv" }, label || "Export CSV");
}

function filterControls(values, onchange, extra) {
  const inputs = {};
  const field = (name, label, input) => {
    inputs[name] = input;
    input.value = values[name] || "";
    input.addEventListener("change", () => { values[name] = input.value; onchange(); });
    return h("label", {}, label, input);
  };
  const sel = (options) => h("select", {}, options.map((o) => h("option", { value: o }, o === "" ? "(all)" : o)));
  const parts = (extra || []).map(([name, label, options]) => field(name, label, sel(options)));
  parts.push(field("from", "from", h("input", { type: "date" })));
  parts.push(field("to", "to", h("input", { type: "date" })));
  parts.push(field("team", "team", h("input", { type: "text", size: 10 })));
  parts.push(field("project", "project", h("input", { type: "text", size: 10 })));
  return h("div", { class: "controls" }, parts);
}

function page(title, ...children) {
  const p = $("page");
  p.replaceChildren(h("h1", {}, title), ...children);
  p.hidden = false;
  $("signin").hidden = true;
  return p;
}

function pageError(r) { return h("p", { class: "error", role: "alert" }, errorText(r)); }

function fmtTime(us) { return us ? new Date(us / 1000).toISOString().replace(".000", "") : ""; }

// ---- finance pages ------------------------------------------------------------------------

const spendState = { bucket: "day", stack: "team", from: "", to: "", team: "", project: "" };

async function spendPage() {
  const s = spendState;
  const filters = { from: s.from, to: s.to, team: s.team, project: s.project };
  const r = await api("/v1/ledger/spend" + query(Object.assign({ bucket: s.bucket, stack: s.stack }, filters)));
  const controls = filterControls(s, spendPage, [
    ["bucket", "period", ["day", "week", "month"]],
    ["stack", "stacked by", ["team", "project", "key", "model", "target", "rule", "none"]]]);
  if (!r.ok) return page("Spend", controls, pageError(r));
  const periods = [...new Set(r.body.series.map((c) => c.period))];
  const groups = [...new Set(r.body.series.map((c) => c.group))];
  const cell = new Map(r.body.series.map((c) => [c.period + "\u0000" + c.group, c]));
  const chart = FerryCharts.stackedBars(periods, groups,
    (p, g) => Number((cell.get(p + "\u0000" + g) || { cost: "0" }).cost));
  // The CLI's own CSV for days and months: `ferry ledger report --by day,team --format csv`.
  const by = (s.bucket === "week" ? "day" : s.bucket) + (s.stack === "none" ? "" : "," + s.stack);
  const csv = s.bucket === "week"
    ? "/v1/ledger/spend" + query(Object.assign({ bucket: "week", stack: s.stack, format: "csv" }, filters))
    : "/v1/ledger/report" + query(Object.assign({ by, format: "csv" }, filters));
  const t = r.body.totals;
  page("Spend (" + r.body.currency + ")", controls, chart, FerryCharts.legend(groups),
    h("p", {}, "Total ", h("b", { id: "spend-total", "data-total": t.cost, "data-bucket": s.bucket, "data-team": s.team }, t.cost), " over ",
      h("span", { id: "spend-requests" }, String(t.requests)), " requests. ", csvLink(csv)),
    table([{ key: "period", title: "period" }, { key: "group", title: s.stack },
           { key: "requests", title: "requests", num: true }, { key: "cost", title: "cost", num: true }],
          r.body.series, { id: "spend-table", total: { period: "total", requests: t.requests, cost: t.cost } }));
}

const localState = { from: "", to: "", team: "", project: "" };

async function localPage() {
  const r = await api("/v1/ledger/local" + query(localState));
  const controls = filterControls(localState, localPage);
  if (!r.ok) return page("Local versus GPU", controls, pageError(r));
  const b = r.body;
  const chart = FerryCharts.stackedBars(b.series.map((d) => d.day), ["local", "gpu"],
    (d, g) => { const row = b.series.find((x) => x.day === d); return Number(g === "local" ? row.local_requests : row.gpu_requests); });
  page("Local versus GPU (" + b.currency + ")", controls,
    h("div", { class: "cards" },
      card("requests answered locally", b.local_request_share_pct + " %", "local-request-share"),
      card("tokens answered locally", b.local_token_share_pct + " %", "local-token-share"),
      card("local internal cost", b.local.cost, "local-cost"),
      card("GPU cost", b.gpu.cost, "gpu-cost"),
      card("avoided (reference model)", b.local.avoided, "local-avoided"),
      card("saved", b.local.saved, "local-saved")),
    h("h2", {}, "Requests per day"), chart, FerryCharts.legend(["local", "gpu"]),
    table([{ key: "day", title: "day" }, { key: "local_requests", title: "local", num: true },
           { key: "gpu_requests", title: "GPU", num: true }, { key: "local_cost", title: "local cost", num: true },
           { key: "gpu_cost", title: "GPU cost", num: true }, { key: "saved", title: "saved", num: true }],
          b.series, { id: "local-table" }),
    csvLink("/v1/ledger/local" + query(Object.assign({ format: "csv" }, localState))));
}

const tasksState = { by: "", from: "", to: "", team: "", project: "", label: "" };

async function tasksPage() {
  const s = tasksState;
  const by = s.by === "label" ? (s.label ? "label:" + s.label : "") : s.by;
  const params = { by, from: s.from, to: s.to, team: s.team, project: s.project };
  const r = await api("/v1/ledger/tasks" + query(params));
  const controls = filterControls(s, tasksPage, [["by", "by", ["", "team", "project", "day", "month", "label"]]]);
  if (s.by === "label") {
    const input = h("input", { type: "text", size: 10, id: "tasks-label" });
    input.value = s.label;
    input.addEventListener("change", () => { s.label = input.value; tasksPage(); });
    controls.appendChild(h("label", {}, "label name", input));
  }
  if (!r.ok) return page("Cost per task", controls, pageError(r));
  const share = (row) => (row.cost === "0.000000" ? "0" : (100 * Number(row.local_cost) / Number(row.cost)).toFixed(1)) + " %";
  page("Cost per task (" + r.body.currency + ")", controls,
    h("p", {}, "A task is an application's unit of work (x-ferry-task); it is ",
      h("b", {}, "open"), " until the application marks it with POST /v1/tasks/{id}. ",
      csvLink("/v1/ledger/tasks" + query(Object.assign({ format: "csv" }, params)))),
    table([{ key: "group", title: by || "all" }, { key: "status", title: "outcome" },
           { key: "tasks", title: "tasks", num: true }, { key: "requests", title: "requests", num: true },
           { key: "cost", title: "cost", num: true }, { key: "cost_per_task", title: "cost per task", num: true },
           { key: "local_cost", title: "local cost", num: true }, { key: "share", title: "local share", num: true, render: share }],
          r.body.rows, { id: "tasks-table" }));
}

const topState = { status: "", offset: 0, from: "", to: "", team: "", project: "" };
const kPageSize = 20;

async function topTasksPage() {
  const s = topState;
  const params = { status: s.status, from: s.from, to: s.to, team: s.team, project: s.project };
  const r = await api("/v1/ledger/top_tasks" + query(Object.assign({ limit: kPageSize, offset: s.offset }, params)));
  const controls = filterControls(s, () => { s.offset = 0; topTasksPage(); },
    [["status", "outcome", ["", "open", "completed", "failed", "abandoned"]]]);
  if (!r.ok) return page("Top tasks", controls, pageError(r));
  const pager = h("p", {}, `${r.body.total} tasks; showing ${s.offset + 1}–${s.offset + r.body.tasks.length} `,
    h("button", { type: "button", disabled: s.offset === 0 ? "" : null,
                  onclick: () => { s.offset = Math.max(0, s.offset - kPageSize); topTasksPage(); } }, "previous"),
    h("button", { type: "button", disabled: s.offset + kPageSize >= r.body.total ? "" : null,
                  onclick: () => { s.offset += kPageSize; topTasksPage(); } }, "next"), " ",
    csvLink("/v1/ledger/top_tasks" + query(Object.assign({ format: "csv", limit: 1000 }, params))));
  page("Top tasks by cost (" + r.body.currency + ")", controls, pager,
    table([{ key: "task", title: "task" }, { key: "status", title: "outcome" }, { key: "team", title: "team" },
           { key: "project", title: "project" }, { key: "requests", title: "requests", num: true },
           { key: "cost", title: "cost", num: true }, { key: "local_cost", title: "local cost", num: true }],
          r.body.tasks, { id: "top-tasks-table", onclick: (t) => { location.hash = "#/task/" + encodeURIComponent(t.task); } }));
}

async function taskPage(id) {
  const r = await api("/v1/ledger/task_requests" + query({ task: id }));
  if (!r.ok) return page("Task", pageError(r));
  const rows = r.body.requests;
  const prices = (q) => q.prices ? `in ${q.prices.input} / cached ${q.prices.cached_input} / out ${q.prices.output} / reasoning ${q.prices.reasoning}` : "unpriced";
  // attempt_list holds the hops of a request that tried more than one target.
  const attempts = (q) => String(q.attempts) + (q.attempt_list.length
    ? " (" + q.attempt_list.map((a) => `${a.attempt}: ${a.target} ${a.status} ${a.http_status}`).join("; ") + ")" : "");
  page("Task " + id,
    h("p", {}, h("a", { href: "#/top" }, "← top tasks"), " ",
      csvLink("/v1/ledger/export.csv" + query({ task: id }), "Export its rows (CSV)")),
    table([{ key: "seq", title: "seq", num: true }, { key: "request_id", title: "request id" },
           { key: "started", title: "started", render: (q) => fmtTime(q.started_us) },
           { key: "target", title: "target" }, { key: "rule_id", title: "rule" },
           { key: "status", title: "status" },
           { key: "input_tokens", title: "input", num: true }, { key: "cached_tokens", title: "cached", num: true },
           { key: "output_tokens", title: "output", num: true }, { key: "reasoning_tokens", title: "reasoning", num: true },
           { key: "cost_total", title: "cost", num: true }, { key: "price_version", title: "price version" },
           { key: "prices", title: "prices per 1M", render: prices },
           { key: "attempts", title: "attempts", render: attempts },
           { key: "chain", title: "chain link", render: (q) => (q.chain_verifies ? "verifies" : "BROKEN") }],
          rows, { id: "task-requests-table" }));
}

async function budgetsPage() {
  const r = await api("/v1/ledger/budgets");
  if (!r.ok) return page("Budgets", pageError(r));
  page("Budgets (" + r.body.currency + ")",
    table([{ key: "name", title: "budget" }, { key: "scope", title: "scope" }, { key: "match", title: "match" },
           { key: "hard", title: "kind", render: (b) => (b.hard ? "hard" : "soft") },
           { key: "period", title: "period" }, { key: "limit", title: "limit", num: true },
           { key: "spent", title: "spent", num: true }, { key: "reserved", title: "reserved (in flight)", num: true },
           { key: "left", title: "left", num: true }, { key: "resets_at", title: "resets" },
           { key: "projected", title: "projected at reset", num: true }],
          r.body.budgets, { id: "budgets-table" }),
    h("p", {}, "Projected: the period's spend so far, extended to its end at the same pace. ",
      csvLink("/v1/ledger/budgets?format=csv")));
}

// ---- admin pages --------------------------------------------------------------------------

let validateTimer = null;

function diagnosticsList(errors, id) {
  return h("ul", { id, class: "error" }, errors.map((e) => h("li", {}, `${e.line}:${e.column}: ${e.message}`)));
}

async function policyPage() {
  const [status, source] = await Promise.all([api("/admin/policy"), api("/admin/policy/source")]);
  if (!status.ok) return page("Policy", pageError(status));
  const s = status.body;
  const editor = h("textarea", { id: "policy-editor", rows: 18, spellcheck: "false" });
  editor.value = source.ok ? source.body.text : "";
  const problems = h("div", { id: "policy-problems" });
  const whatif = h("div", { id: "whatif" });
  const applied = h("div", { id: "policy-applied" });
  const days = h("input", { id: "whatif-days", type: "number", min: 1, max: 3650, value: 30 });
  const validate = async () => {
    const r = await api("/admin/policy/validate", { method: "POST", body: editor.value });
    if (!r.ok) return problems.replaceChildren(pageError(r));
    problems.replaceChildren(r.body.valid
      ? h("p", { class: "ok", id: "policy-valid" }, "valid (version " + r.body.version + ")")
      : diagnosticsList(r.body.errors, "policy-errors"));
  };
  editor.addEventListener("input", () => { clearTimeout(validateTimer); validateTimer = setTimeout(validate, 250); });
  const runWhatIf = async () => {
    const r = await api("/admin/policy/whatif" + query({ days: days.value }), { method: "POST", body: editor.value });
    if (r.status === 422) return whatif.replaceChildren(diagnosticsList(r.body.errors, "whatif-errors"));
    if (!r.ok) return whatif.replaceChildren(pageError(r));
    const b = r.body;
    whatif.replaceChildren(
      h("p", {}, "Replayed ", h("b", { id: "whatif-replayed" }, String(b.replayed)), " requests; ",
        h("b", { id: "whatif-moved" }, String(b.moved)), " would move; cost difference ",
        h("b", { id: "whatif-difference" }, String(b.difference)), " " + b.currency + "."),
      table([{ key: "from", title: "from" }, { key: "to", title: "to" }, { key: "requests", title: "requests", num: true },
             { key: "old_cost", title: "cost now", num: true }, { key: "new_cost", title: "cost then", num: true }],
            b.matrix || [], { id: "whatif-table" }));
  };
  const apply = async () => {
    const r = await api("/admin/policy", { method: "PUT", body: editor.value });
    if (r.status === 422) {
      applied.replaceChildren(h("p", { class: "error" }, "not applied: the old policy keeps serving"),
                              diagnosticsList(r.body.errors, "apply-errors"));
      return;
    }
    if (!r.ok) return applied.replaceChildren(pageError(r));
    applied.replaceChildren(h("p", { class: "ok", id: "apply-ok" },
      r.body.unchanged ? "unchanged (same version)" : "applied: version " + r.body.version));
  };
  const rejected = s.last_rejected
    ? h("div", { id: "policy-last-rejected" }, h("p", {}, `last rejected: ${s.last_rejected.version} at ${s.last_rejected.at} (${s.last_rejected.trigger})`),
        diagnosticsList(s.last_rejected.errors, "policy-rejected-errors"))
    : h("p", { id: "policy-last-rejected" }, "no rejected reload");
  page("Policy",
    h("div", { class: "cards" }, card("active version", s.version, "policy-version"),
      card("loaded at", s.loaded_at, "policy-loaded-at"), card("loaded by", s.loaded_by),
      card("rules", String(s.rules))),
    rejected, h("h2", {}, "Edit (validated as you type by the server's loader)"), editor, problems,
    h("div", { class: "controls" }, h("label", {}, "what-if over the last N days", days),
      h("button", { type: "button", id: "whatif-run", onclick: runWhatIf }, "What if?"),
      h("button", { type: "button", id: "policy-apply", onclick: apply }, "Apply")),
    whatif, applied);
}

async function explainPage() {
  const body = h("textarea", { id: "explain-body", rows: 10 });
  body.value = JSON.stringify({ model: "default", messages: [{ role: "user", content: "hello" }], max_tokens: 64 }, null, 2);
  const keys = await api("/admin/keys");
  const key = h("select", { id: "explain-key" }, h("option", { value: "" }, "(as me)"),
    (keys.ok ? keys.body.keys : []).map((k) => h("option", { value: k.id }, k.id)));
  const out = h("div", { id: "explain-out" });
  const recent = await api("/admin/route/recent");
  const pick = h("select", { id: "explain-recent" }, h("option", { value: "" }, "(paste a body above)"),
    (recent.ok ? recent.body.requests : []).map((q) => h("option", { value: q.id },
      `${fmtTime(q.started_us)} ${q.key} ${q.model} → ${q.target}`)));
  const run = async () => {
    const r = pick.value
      ? await api("/admin/route/explain_recorded" + query({ request: pick.value }))
      : await api("/admin/route/explain" + query({ key: key.value }), { method: "POST", body: body.value });
    if (!r.ok) return out.replaceChildren(pageError(r));
    const d = r.body.decision || {};
    out.replaceChildren(
      h("p", {}, "decision: ", h("b", { id: "explain-decision" }, JSON.stringify(d.targets || d.action || d))),
      ...(r.body.rules || []).map((rule) => h("div", { class: "card" },
        h("div", { class: "label" }, `rule ${rule.id} (line ${rule.line})${rule.chosen ? " — chosen" : ""}`),
        h("ul", {}, rule.clauses.map((c) => h("li", { class: c.value ? "ok" : "error" }, `${c.value ? "true " : "false"}  ${c.clause}`))))));
  };
  page("Explain", h("p", {}, "Paste a request body, or pick a recent request; see every rule's clauses and the decision (no backend is called)."),
    body, h("div", { class: "controls" }, h("label", {}, "or pick a recent request (its recorded facts)", pick),
      h("label", {}, "route as key", key),
      h("button", { type: "button", id: "explain-run", onclick: run }, "Explain")), out);
}

let backendsTimer = null;

async function backendsPage() {
  const r = await api("/admin/backends");
  if (!r.ok) return page("Backends", pageError(r));
  const local = (b, k) => (b.local ? String(b.local[k]) : "");
  page("Backends",
    table([{ key: "target", title: "target" }, { key: "backend", title: "backend" }, { key: "kind", title: "kind" },
           { key: "healthy", title: "healthy", render: (b) => (b.healthy ? "yes" : "no") },
           { key: "circuit", title: "circuit" }, { key: "queue_depth", title: "queue", num: true },
           { key: "ttft_p90_ms", title: "TTFT p90 ms", num: true, render: (b) => (b.ttft_p90_ms === null ? "" : String(b.ttft_p90_ms)) },
           { key: "error_rate_pct", title: "errors %", num: true, render: (b) => b.error_rate_pct ?? "" },
           { key: "tps", title: "local tokens/s", num: true, render: (b) => local(b, "tokens_per_second") },
           { key: "kv", title: "KV use %", num: true, render: (b) => local(b, "kv_use_pct") }],
          r.body.backends, { id: "backends-table" }),
    h("p", {}, "Refreshed every 5 s (the last 128 requests per target for TTFT and errors)."));
  clearTimeout(backendsTimer);
  backendsTimer = setTimeout(() => { if (location.hash === "#/backends") backendsPage(); }, 5000);
}

async function keysPage(created) {
  const r = await api("/admin/keys");
  if (!r.ok) return page("Keys", pageError(r));
  const columns = [{ key: "id", title: "id" }, { key: "source", title: "source" }, { key: "role", title: "role" },
    { key: "team", title: "team" }, { key: "project", title: "project" },
    { key: "tags", title: "tags", render: (k) => (k.tags || []).join(", ") }];
  if (r.body.read_only) {
    return page("Keys",
      h("p", {}, "Read-only: keys live in the server config (", h("code", {}, "auth.keys"),
        "); add or revoke one there. Only ids are shown, never a key or its hash."),
      table(columns, r.body.keys, { id: "keys-table" }));
  }
  const revoke = async (k) => {
    const done = await api("/admin/keys/" + encodeURIComponent(k.id), { method: "DELETE" });
    if (!done.ok) return $("keys-error").replaceChildren(pageError(done));
    keysPage();
  };
  columns.push({ key: "state", title: "state", render: (k) => (k.source === "config" ? "config" : k.revoked_us ? "revoked " + fmtTime(k.revoked_us) : "active") });
  columns.push({ key: "action", title: "", render: (k) => (k.source === "store" && !k.revoked_us
    ? h("button", { type: "button", class: "revoke", "data-key": k.id, onclick: () => revoke(k) }, "Revoke") : "") });
  const id = h("input", { type: "text", size: 12, id: "key-id", placeholder: "(random)" });
  const role = h("select", { id: "key-role" }, ["app", "finance", "admin"].map((o) => h("option", { value: o }, o)));
  const team = h("input", { type: "text", size: 10, id: "key-team" });
  const project = h("input", { type: "text", size: 10, id: "key-project" });
  const create = async () => {
    const spec = { role: role.value, team: team.value, project: project.value };
    if (id.value) spec.id = id.value;
    const made = await api("/admin/keys", { method: "POST", body: JSON.stringify(spec), headers: { "content-type": "application/json" } });
    if (!made.ok) return $("keys-error").replaceChildren(pageError(made));
    keysPage(made.body);
  };
  const shown = created
    ? h("div", { class: "card", id: "key-created" }, h("div", { class: "label" }, `key ${created.id} — shown once, copy it now`),
        h("code", { id: "key-secret" }, created.key))
    : null;
  page("Keys",
    h("p", {}, "Keys kept in the ledger's database: create (the key is shown once; ferry keeps only its SHA-256) ",
      "and revoke (every instance refuses it within 5 s). Config keys are listed read-only."),
    h("div", { class: "controls" }, h("label", {}, "id", id), h("label", {}, "role", role), h("label", {}, "team", team),
      h("label", {}, "project", project), h("button", { type: "button", id: "key-create", onclick: create }, "Create key")),
    shown, h("div", { id: "keys-error" }),
    table(columns, r.body.keys, { id: "keys-table" }));
}

// ---- sign-in, navigation ------------------------------------------------------------------

const kRoutes = [
  { hash: "#/spend", title: "Spend", role: "finance", render: spendPage },
  { hash: "#/local", title: "Local vs GPU", role: "finance", render: localPage },
  { hash: "#/tasks", title: "Cost per task", role: "finance", render: tasksPage },
  { hash: "#/top", title: "Top tasks", role: "finance", render: topTasksPage },
  { hash: "#/budgets", title: "Budgets", role: "finance", render: budgetsPage },
  { hash: "#/policy", title: "Policy", role: "admin", render: policyPage },
  { hash: "#/explain", title: "Explain", role: "admin", render: explainPage },
  { hash: "#/backends", title: "Backends", role: "admin", render: backendsPage },
  { hash: "#/keys", title: "Keys", role: "admin", render: keysPage },
];

function allowed(route) {
  return state.session && (state.session.role === "admin" || route.role === state.session.role);
}

function showSignIn() {
  state.session = null;
  state.csrf = "";
  $("nav").hidden = true;
  $("signout").hidden = true;
  $("who").textContent = "";
  $("page").hidden = true;
  $("signin").hidden = false;
}

function signedIn(s) {
  state.session = s;
  state.csrf = s.csrf_token;
  $("who").textContent = `${s.key_id} (${s.role})`;
  $("signout").hidden = false;
  const nav = $("nav");
  nav.replaceChildren();
  for (const group of ["finance", "admin"]) {
    const routes = kRoutes.filter((r) => r.role === group && allowed(r));
    if (!routes.length) continue;
    nav.appendChild(h("span", { class: "group" }, group));
    for (const r of routes) nav.appendChild(h("a", { href: r.hash, "data-route": r.hash }, r.title));
  }
  nav.hidden = false;
  route();
}

async function route() {
  if (!state.session) return showSignIn();
  const hash = location.hash || "";
  for (const a of $("nav").querySelectorAll("a")) a.classList.toggle("active", a.getAttribute("href") === hash);
  if (hash.startsWith("#/task/")) return taskPage(decodeURIComponent(hash.slice(7)));
  const r = kRoutes.find((x) => x.hash === hash && allowed(x));
  if (!r) { location.hash = state.session.role === "admin" ? "#/policy" : "#/spend"; return; }
  await r.render();
  document.body.setAttribute("data-page", r.hash.slice(2));
}

async function start() {
  $("signin-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const key = $("signin-key").value;
    $("signin-key").value = "";
    const r = await api("/session", { method: "POST", body: JSON.stringify({ key }),
                                      headers: { "content-type": "application/json" } });
    if (!r.ok) { $("signin-error").textContent = errorText(r); return; }
    $("signin-error").textContent = "";
    signedIn(r.body);
  });
  $("signout").addEventListener("click", async () => {
    await api("/session", { method: "DELETE" });
    showSignIn();
  });
  window.addEventListener("hashchange", route);
  const r = await api("/session");
  if (r.ok) signedIn(r.body); else showSignIn();
}

document.addEventListener("DOMContentLoaded", start);
