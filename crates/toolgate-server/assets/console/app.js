// The toolgate console: plain ES module, no framework, no build step (see console.rs).
// Every request goes through `api()` with the signed-in key; live views read SSE with
// fetch so the key travels in the Authorization header.

const KEY = "toolgate.key";
// A single sign-on under way: its state, PKCE verifier and token endpoint.
const SSO = "toolgate.sso";
const $ = (id) => document.getElementById(id);
const pages = ["calls", "audit", "approvals", "runs", "tools", "keys"];
// Who is signed in (`GET /v1/me`): pages need the scope their link names.
let me = null;

// ---- the API ---------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
  }
}

function key() {
  return sessionStorage.getItem(KEY);
}

async function api(path, options = {}) {
  const headers = { authorization: `Bearer ${key()}`, ...(options.headers || {}) };
  if (options.body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, {
    ...options,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  if (response.status === 401 && path !== "/v1/me") signOut("Your key was refused: sign in again.");
  const text = await response.text();
  const body = text ? JSON.parse(text) : null;
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

/** A message for a failed request: what the caller may do about it. */
function explain(err, scope) {
  if (err.status === 403) return `This key may not do this (it needs ${scope}).`;
  return err.message;
}

/**
 * Follows an SSE stream: calls onEvent(name, data, id) per event, onState(text) on
 * changes; reconnects (with Last-Event-ID) after a drop. Returns a stop function.
 */
function follow(path, onEvent, onState, scope) {
  const abort = new AbortController();
  let last = null;
  let stopped = false;
  (async () => {
    while (!stopped) {
      try {
        const headers = { authorization: `Bearer ${key()}`, accept: "text/event-stream" };
        if (last !== null) headers["last-event-id"] = last;
        const response = await fetch(path, { headers, signal: abort.signal });
        if (!response.ok) {
          const text = await response.text();
          throw new ApiError(response.status, text ? JSON.parse(text) : null);
        }
        onState("live");
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            let name = "message", data = "", id = null;
            for (const line of block.split("\n")) {
              if (line.startsWith("event:")) name = line.slice(6).trim();
              else if (line.startsWith("data:")) data += line.slice(5).trim();
              else if (line.startsWith("id:")) id = line.slice(3).trim();
            }
            if (id !== null) last = id;
            if (data) onEvent(name, JSON.parse(data), id);
          }
        }
        onState("reconnecting…");
      } catch (err) {
        if (stopped) return;
        if (err.status === 401 || err.status === 403) {
          onState(explain(err, scope));
          return;
        }
        onState("reconnecting…");
      }
      await new Promise((r) => setTimeout(r, 2000));
    }
  })();
  return () => {
    stopped = true;
    abort.abort();
  };
}

// ---- rendering helpers -------------------------------------------------------------

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text ?? "";
  if (className) td.className = className;
  return td;
}

function outcomeClass(outcome) {
  return outcome === "ok" ? "outcome-ok" : "outcome-bad";
}

function time(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

function download(name, type, text) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// ---- live calls --------------------------------------------------------------------

const calls = { rows: [], stop: null };

function renderCalls() {
  const filter = $("calls-filter").value.trim().toLowerCase();
  const body = $("calls-rows");
  body.replaceChildren();
  for (const c of calls.rows) {
    const text = `${c.tool} ${c.adapter} ${c.principal_id} ${c.client ?? ""} ${c.outcome}`.toLowerCase();
    if (filter && !text.includes(filter)) continue;
    const tr = document.createElement("tr");
    tr.tabIndex = 0;
    tr.dataset.callId = c.call_id;
    tr.append(
      cell(time(c.finished_at)), cell(c.tool), cell(c.adapter), cell(c.principal_id),
      cell(c.client), cell(c.outcome, outcomeClass(c.outcome)), cell(c.duration_ms.toFixed(1)),
    );
    const open = () => openAuditRow(c.call_id);
    tr.addEventListener("click", open);
    tr.addEventListener("keydown", (e) => e.key === "Enter" && open());
    body.append(tr);
  }
}

function startCalls() {
  if (calls.stop) return;
  calls.stop = follow(
    "/v1/audit/events",
    (name, entry) => {
      if (name !== "call") return;
      calls.rows.unshift(entry);
      calls.rows.length = Math.min(calls.rows.length, 500);
      renderCalls();
      chartSoon();
    },
    (state) => ($("calls-state").textContent = state),
    "audit:read",
  );
}

// ---- chart: calls per minute, p50/p99, from the audit log --------------------------

const chart = { timer: null, soon: null };
const SVG = "http://www.w3.org/2000/svg";

async function loadChart() {
  clearTimeout(chart.timer);
  let summary;
  try {
    summary = await api("/v1/audit/summary?minutes=60");
  } catch {
    return;
  }
  renderChart(summary.minutes);
  if (!$("calls").hidden) chart.timer = setTimeout(loadChart, 30000);
}

/** Reloads the chart a little after calls arrive (at most every 5 s). */
function chartSoon() {
  if (chart.soon) return;
  chart.soon = setTimeout(() => {
    chart.soon = null;
    loadChart();
  }, 5000);
}

function renderChart(minutes) {
  const svg = $("chart-svg");
  svg.replaceChildren();
  const now = Math.floor(Date.now() / 60000);
  const slot = 10; // 60 minutes across 600 units
  const maxCalls = Math.max(1, ...minutes.map((m) => m.ok + m.errors));
  const maxMs = Math.max(1, ...minutes.map((m) => m.p99_ms));
  const x = (m) => (59 - (now - Math.floor(new Date(m.minute).getTime() / 60000))) * slot;
  const lines = { p50: [], p99: [] };
  let calls = 0, errors = 0;
  for (const m of minutes) {
    const left = x(m);
    if (left < 0 || left > 590) continue;
    calls += m.ok + m.errors;
    errors += m.errors;
    const okHeight = (m.ok / maxCalls) * 140;
    const badHeight = (m.errors / maxCalls) * 140;
    for (const [cls, y, h] of [["bar-ok", 150 - okHeight, okHeight], ["bar-bad", 150 - okHeight - badHeight, badHeight]]) {
      if (h <= 0) continue;
      const rect = document.createElementNS(SVG, "rect");
      rect.setAttribute("class", cls);
      rect.setAttribute("x", left + 1);
      rect.setAttribute("y", y);
      rect.setAttribute("width", slot - 2);
      rect.setAttribute("height", h);
      const title = document.createElementNS(SVG, "title");
      title.textContent = `${new Date(m.minute).toLocaleTimeString()}: ${m.ok} ok, ${m.errors} errors, p50 ${m.p50_ms.toFixed(1)} ms, p99 ${m.p99_ms.toFixed(1)} ms`;
      rect.append(title);
      svg.append(rect);
    }
    lines.p50.push(`${left + slot / 2},${150 - (m.p50_ms / maxMs) * 140}`);
    lines.p99.push(`${left + slot / 2},${150 - (m.p99_ms / maxMs) * 140}`);
  }
  for (const [name, points] of Object.entries(lines)) {
    if (points.length < 2) continue;
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("class", `line-${name}`);
    line.setAttribute("points", points.join(" "));
    svg.append(line);
  }
  const p99 = minutes.length ? Math.max(...minutes.map((m) => m.p99_ms)) : 0;
  $("chart-caption").textContent =
    `Last hour: ${calls} calls, ${errors} errors; worst minute's p99 ${p99.toFixed(1)} ms (scale: ${maxCalls} calls, ${maxMs.toFixed(1)} ms)`;
}

// ---- audit -------------------------------------------------------------------------

const audit = { rows: [], cursor: null, query: "" };

function auditQuery() {
  const form = new FormData($("audit-form"));
  const params = new URLSearchParams();
  for (const [name, value] of form) {
    const v = String(value).trim();
    if (!v) continue;
    params.set(name, name === "since" || name === "until" ? new Date(v).toISOString() : v);
  }
  return params;
}

async function searchAudit(more = false) {
  $("audit-error").textContent = "";
  const params = more ? new URLSearchParams(audit.query) : auditQuery();
  if (!more) {
    audit.query = params.toString();
    audit.rows = [];
    $("audit-detail").hidden = true;
  } else if (audit.cursor) {
    params.set("cursor", audit.cursor);
  }
  params.set("limit", "100");
  try {
    const page = await api(`/v1/audit?${params}`);
    audit.rows.push(...page.entries);
    audit.cursor = page.next_cursor ?? null;
  } catch (err) {
    $("audit-error").textContent = explain(err, "audit:read");
  }
  $("audit-more").disabled = !audit.cursor;
  const body = $("audit-rows");
  body.replaceChildren();
  for (const r of audit.rows) {
    const tr = document.createElement("tr");
    tr.tabIndex = 0;
    tr.dataset.callId = r.call_id;
    tr.append(
      cell(r.seq), cell(time(r.started_at)), cell(r.tool), cell(r.adapter), cell(r.principal_id),
      cell(r.outcome, outcomeClass(r.outcome)), cell(r.duration_ms.toFixed(1)), cell(r.call_id),
    );
    const show = () => {
      $("audit-detail").textContent = JSON.stringify(r, null, 2);
      $("audit-detail").hidden = false;
      $("audit-detail").focus();
    };
    tr.addEventListener("click", show);
    tr.addEventListener("keydown", (e) => e.key === "Enter" && show());
    body.append(tr);
  }
  return audit.rows;
}

async function openAuditRow(callId) {
  location.hash = "#audit";
  const form = $("audit-form");
  form.reset();
  form.elements.call_id.value = callId;
  const rows = await searchAudit();
  if (rows.length === 1) {
    $("audit-detail").textContent = JSON.stringify(rows[0], null, 2);
    $("audit-detail").hidden = false;
  }
}

function csv(rows) {
  const columns = ["seq", "call_id", "started_at", "finished_at", "tool", "adapter", "principal_id",
    "outcome", "error", "duration_ms", "run_id", "trace_id", "client", "approval_id", "cache", "arguments_hash", "row_hash"];
  const quote = (v) => {
    const s = v === null || v === undefined ? "" : String(v);
    return /[",\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
  };
  return [columns.join(","), ...rows.map((r) => columns.map((c) => quote(r[c])).join(","))].join("\n") + "\n";
}

async function verifyChain() {
  const out = $("audit-verified");
  out.className = "";
  out.textContent = "verifying…";
  try {
    const v = await api("/v1/audit/verify", { method: "POST" });
    out.className = `verified-${v.verified}`;
    out.textContent = v.verified
      ? `Chain verified: ${v.rows} row${v.rows === 1 ? "" : "s"}` +
        (v.pruned_through ? `, from row ${v.pruned_through + 1} (older rows pruned ${new Date(v.pruned_at).toLocaleString()})` : "") +
        (v.signed_by ? `, checkpoints signed by ${v.signed_by}` : "") +
        (v.previous_keys?.length ? ` or a key it replaced (${v.previous_keys.join(", ")})` : "") + "."
      : `Chain broken: ${v.problem.message}`;
  } catch (err) {
    out.textContent = explain(err, "audit:read");
  }
}

// ---- approvals ---------------------------------------------------------------------

const approvals = { stop: null };

async function loadApprovals() {
  $("approvals-error").textContent = "";
  let list;
  try {
    list = (await api("/v1/approvals")).approvals;
  } catch (err) {
    $("approvals-error").textContent = explain(err, "approvals:decide");
    return;
  }
  const ul = $("approvals-list");
  ul.replaceChildren();
  $("approvals-empty").hidden = list.length > 0;
  for (const a of list) {
    const li = document.createElement("li");
    li.dataset.approvalId = a.id;
    const h = document.createElement("h2");
    h.textContent = `${a.tool} `;
    const risk = document.createElement("span");
    risk.className = `risk-${a.risk}`;
    risk.textContent = `(${a.risk} risk)`;
    h.append(risk);
    const who = document.createElement("p");
    const ageMin = Math.round((Date.now() - new Date(a.created_at)) / 60000);
    who.className = "hint";
    who.textContent = `asked by ${a.requester.name ?? a.requester.id} via ${a.adapter}` +
      `${a.agent ? ` (agent ${a.agent})` : ""}, ${ageMin} min ago; expires ${time(a.expires_at)}`;
    const args = document.createElement("pre");
    args.textContent = JSON.stringify(a.arguments, null, 2);
    const form = document.createElement("form");
    form.className = "decide";
    const label = document.createElement("label");
    label.textContent = "Reason";
    const reason = document.createElement("input");
    reason.name = "reason";
    label.append(reason);
    const approve = document.createElement("button");
    approve.type = "submit";
    approve.value = "approve";
    approve.textContent = "Approve";
    const deny = document.createElement("button");
    deny.type = "submit";
    deny.value = "deny";
    deny.className = "secondary";
    deny.textContent = "Deny";
    const status = document.createElement("p");
    status.className = "error";
    status.setAttribute("role", "alert");
    form.append(label, approve, deny);
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const decision = e.submitter?.value ?? "approve";
      try {
        const body = { decision };
        if (reason.value.trim()) body.reason = reason.value.trim();
        await api(`/v1/approvals/${a.id}`, { method: "POST", body });
        await loadApprovals();
      } catch (err) {
        status.textContent = explain(err, "approvals:decide");
      }
    });
    li.append(h, who, args, form, status);
    ul.append(li);
  }
}

function startApprovals() {
  loadApprovals();
  if (approvals.stop) return;
  approvals.stop = follow("/v1/approvals/events", () => loadApprovals(), () => {}, "approvals:decide");
}

// ---- runs --------------------------------------------------------------------------

const runs = { stop: null, rows: [], cursor: null };

// The first page of runs in the chosen status, or (`more`) the next one after it.
async function loadRuns(more = false) {
  $("runs-error").textContent = "";
  const params = new URLSearchParams({ limit: "50", status: $("runs-status").value });
  if (more && runs.cursor) params.set("cursor", runs.cursor);
  let page;
  try {
    page = await api(`/v1/runs?${params}`);
  } catch (err) {
    $("runs-error").textContent = explain(err, "agents:run");
    return;
  }
  runs.rows = more ? runs.rows.concat(page.runs) : page.runs;
  runs.cursor = page.next_cursor ?? null;
  $("runs-more").disabled = !runs.cursor;
  const body = $("runs-rows");
  body.replaceChildren();
  for (const r of runs.rows) {
    const tr = document.createElement("tr");
    tr.tabIndex = 0;
    tr.dataset.runId = r.id;
    tr.append(cell(time(r.created_at)), cell(r.agent_name), cell(r.status), cell(r.input.slice(0, 80)), cell(r.id));
    const open = () => openRun(r.id);
    tr.addEventListener("click", open);
    tr.addEventListener("keydown", (e) => e.key === "Enter" && open());
    body.append(tr);
  }
  body.dataset.status = params.get("status");
}

function describeStep(type, d) {
  switch (type) {
    case "model_message": {
      const m = d.message ?? {};
      const calls = (m.tool_calls ?? []).map((c) => c.name).join(", ");
      const said = m.text ? `model: ${m.text}` : `model calls ${calls}`;
      const u = d.usage;
      return u ? `${said} (${u.input_tokens} in, ${u.output_tokens} out tokens)` : said;
    }
    case "model_routed": return `${d.model} wanted tools: routed to the main model`;
    case "tool_call_started": return `calls ${d.tool}`;
    case "tool_call_finished": return `${d.result?.name ?? "tool"}: ${d.result?.is_error ? "error" : "ok"}`;
    case "run_finished": return `finished: ${d.status}${d.output ? ` — ${d.output}` : ""}`;
    default: return type.replaceAll("_", " ");
  }
}

async function openRun(id) {
  runs.stop?.();
  $("run").hidden = false;
  $("run-title").textContent = `Run ${id}`;
  const steps = $("run-steps");
  steps.replaceChildren();
  const status = (s) => {
    $("run-status").textContent = s;
    $("run-status").dataset.status = s;
    $("run-cancel").hidden = s !== "running";
  };
  try {
    status((await api(`/v1/runs/${id}`)).status);
  } catch (err) {
    $("runs-error").textContent = explain(err, "agents:run");
    return;
  }
  $("run-cancel").onclick = async () => {
    try {
      await api(`/v1/runs/${id}/cancel`, { method: "POST" });
    } catch (err) {
      $("runs-error").textContent = explain(err, "agents:run");
    }
  };
  runs.stop = follow(`/v1/runs/${id}/events`, (type, step, n) => {
    // A streaming agent's reply as it is written: one line per turn, growing, replaced
    // by the whole message when it lands.
    const typing = (turn) => steps.querySelector(`li[data-type="model_delta"][data-turn="${turn}"]`);
    if (type === "model_delta") {
      let li = typing(step.turn);
      if (!li) {
        li = document.createElement("li");
        li.dataset.type = "model_delta";
        li.dataset.turn = String(step.turn);
        li.setAttribute("aria-live", "polite");
        li.textContent = "model: ";
        steps.append(li);
      }
      if (step.restart) li.textContent = "model: ";
      else if (step.text) li.textContent += step.text;
      return;
    }
    if (type === "model_message" || type === "model_routed") typing(step.turn)?.remove();
    const li = document.createElement("li");
    li.dataset.type = type;
    li.textContent = describeStep(type, step);
    const raw = document.createElement("code");
    raw.textContent = ` ${JSON.stringify(step).slice(0, 300)}`;
    li.append(raw);
    steps.append(li);
    if (type === "run_finished" || type === "run_paused") {
      api(`/v1/runs/${id}`).then((r) => { status(r.status); loadRuns(); }).catch(() => {});
    }
  }, () => {}, "agents:run");
}

// ---- tools and upstreams -----------------------------------------------------------

const tools = { timer: null, names: new Set(), signature: "", quiet: 0 };

async function loadTools() {
  $("tools-error").textContent = "";
  try {
    const list = [];
    let cursor = null;
    do {
      const page = await api(`/v1/tools?limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
      list.push(...page.tools);
      cursor = page.next_cursor ?? null;
    } while (cursor);
    tools.names = new Set(list.map((t) => t.name));
    const body = $("tools-rows");
    body.replaceChildren();
    for (const t of list) {
      const tr = document.createElement("tr");
      tr.dataset.tool = t.name;
      tr.append(cell(t.name), cell(t.category), cell(t.risk, `risk-${t.risk}`),
        cell(t.available ? "yes" : "no"), cell(t.description.split("\n")[0], "wrap"));
      body.append(tr);
    }
  } catch (err) {
    $("tools-error").textContent = explain(err, "tools:invoke");
  }
  if (me?.scopes.includes("tenant:admin")) {
    loadUpstreams();
    loadDefinitions();
  }
}

/** Changed upstream tool definitions withheld until a tenant admin approves them. */
async function loadDefinitions() {
  let waiting;
  try {
    // The first 500 waiting; approving some shows the next.
    waiting = (await api("/v1/tool-definitions?status=quarantined&limit=500")).definitions;
  } catch (err) {
    $("definitions-waiting").hidden = true;
    return;
  }
  $("definitions-waiting").hidden = waiting.length === 0;
  const body = $("definitions-rows");
  body.replaceChildren();
  for (const d of waiting) {
    const tr = document.createElement("tr");
    tr.dataset.definition = d.exported;
    const changed = Object.entries(d.diff ?? {})
      .map(([field, { after }]) => `${field}: ${typeof after === "string" ? after : JSON.stringify(after)}`)
      .join("\n");
    tr.append(cell(d.upstream), cell(d.exported), cell(changed, "wrap"), cell(d.findings.join("; "), "wrap"));
    const td = document.createElement("td");
    const approve = document.createElement("button");
    approve.type = "button";
    approve.textContent = "Approve";
    approve.setAttribute("aria-label", `Approve the new definition of ${d.exported}`);
    approve.addEventListener("click", async () => {
      try {
        await api(`/v1/tool-definitions/${encodeURIComponent(d.upstream)}/${encodeURIComponent(d.tool)}/approve`, {
          method: "POST",
          body: { hash: d.pending_hash },
        });
      } catch (err) {
        $("tools-error").textContent = explain(err, "tenant:admin");
      }
      loadTools();
    });
    td.append(approve);
    tr.append(td);
    body.append(tr);
  }
}

async function loadUpstreams() {
  clearTimeout(tools.timer);
  let list;
  try {
    list = (await api("/v1/upstreams")).upstreams;
  } catch (err) {
    $("upstreams-admin").hidden = true;
    if (err.status !== 404) $("tools-error").textContent = explain(err, "tenant:admin");
    return;
  }
  $("upstreams-admin").hidden = false;
  const body = $("upstreams-rows");
  body.replaceChildren();
  for (const u of list) {
    const tr = document.createElement("tr");
    tr.dataset.upstream = u.name;
    tr.dataset.state = u.status.state;
    tr.append(cell(u.name), cell(u.url), cell(u.status.state), cell(u.status.tools.join(", "), "wrap"),
      cell(u.status.last_error ?? (u.status.notes ?? []).join("; "), "wrap"));
    const td = document.createElement("td");
    // An HTTP API's document is replaced over REST (PUT with `openapi`); the form edits
    // MCP servers.
    if (u.kind !== "http") {
      const edit = document.createElement("button");
      edit.type = "button";
      edit.className = "secondary";
      edit.textContent = "Edit";
      edit.setAttribute("aria-label", `Edit ${u.name}`);
      edit.addEventListener("click", () => editUpstream(u));
      td.append(edit, " ");
    }
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "secondary";
    remove.textContent = "Delete";
    remove.setAttribute("aria-label", `Delete ${u.name}`);
    remove.addEventListener("click", async () => {
      try {
        await api(`/v1/upstreams/${encodeURIComponent(u.name)}`, { method: "DELETE" });
      } catch (err) {
        $("tools-error").textContent = explain(err, "tenant:admin");
      }
      loadTools();
    });
    td.append(remove);
    tr.append(td);
    body.append(tr);
  }
  // Connection states and tool lists move in the background (an upstream reports
  // `connected` before its tools are listed): look again every second while one is on
  // its way, an upstream's tools have not joined the list, or anything changed in the
  // last five looks.
  const moving = list.some((u) => ["connecting", "starting"].includes(u.status.state));
  const missing = list.some((u) => u.status.tools.some((t) => !tools.names.has(t)));
  const signature = JSON.stringify(list.map((u) => [u.name, u.status.state, u.status.tools]));
  tools.quiet = moving || missing || signature !== tools.signature ? 0 : tools.quiet + 1;
  tools.signature = signature;
  if (!$("tools").hidden && tools.quiet < 5) {
    tools.timer = setTimeout(loadTools, 1000);
  }
}

// The upstream being edited (as listed), or null when the form adds one.
let editing = null;

const globs = (text) => String(text ?? "").split(",").map((g) => g.trim()).filter(Boolean);

function editUpstream(u) {
  editing = u;
  const form = $("upstream-form");
  form.elements.name.value = u.name;
  form.elements.url.value = u.url;
  form.elements.bearer.value = "";
  form.elements.bearer.placeholder = u.bearer || u.headers.length ? "kept unless you type one" : "";
  form.elements.allow.value = u.allow.join(", ");
  form.elements.deny.value = u.deny.join(", ");
  form.elements.drop.checked = false;
  $("upstream-drop").hidden = !(u.bearer || u.headers.length);
  $("upstream-bearer-help").hidden = false;
  $("upstream-cancel").hidden = false;
  $("upstream-submit").textContent = "Save upstream";
  form.elements.url.focus();
}

function stopEditing() {
  editing = null;
  const form = $("upstream-form");
  form.reset();
  form.elements.bearer.placeholder = "";
  $("upstream-drop").hidden = true;
  $("upstream-bearer-help").hidden = true;
  $("upstream-cancel").hidden = true;
  $("upstream-submit").textContent = "Add upstream";
}

async function saveUpstream(e) {
  e.preventDefault();
  const form = new FormData($("upstream-form"));
  const body = {
    name: String(form.get("name")).trim(),
    url: String(form.get("url")).trim(),
    allow: globs(form.get("allow")),
    deny: globs(form.get("deny")),
  };
  const bearer = String(form.get("bearer") ?? "").trim();
  if (bearer) body.bearer = bearer;
  try {
    if (editing) {
      // A replacement: what the form does not show is sent back as it was (a prefix
      // that was the default follows the new name), credentials kept unless replaced
      // or removed.
      if (editing.prefix !== `${editing.name}__`) body.prefix = editing.prefix;
      body.timeout_secs = editing.timeout_secs;
      body.max_timeout_secs = editing.max_timeout_secs;
      if (editing.progress_extends_ms) body.progress_extends_ms = editing.progress_extends_ms;
      body.keep_credentials = !bearer && !form.get("drop");
      await api(`/v1/upstreams/${encodeURIComponent(editing.name)}`, { method: "PUT", body });
    } else {
      await api("/v1/upstreams", { method: "POST", body });
    }
    stopEditing();
  } catch (err) {
    $("tools-error").textContent = explain(err, "tenant:admin");
  }
  loadTools();
}

// ---- keys --------------------------------------------------------------------------

async function loadKeys() {
  $("keys-error").textContent = "";
  let principals, keys;
  try {
    [principals, keys] = await Promise.all([api("/v1/principals"), api("/v1/keys")]);
  } catch (err) {
    $("keys-error").textContent = explain(err, "tenant:admin");
    return;
  }
  const names = new Map(principals.map((p) => [p.id, p.name]));
  const select = $("key-principal");
  const chosen = select.value;
  select.replaceChildren(...principals.map((p) => {
    const o = document.createElement("option");
    o.value = p.id;
    o.textContent = `${p.name} (${p.scopes.join(", ") || p.roles.join(", ")})`;
    return o;
  }));
  if (chosen) select.value = chosen;
  const body = $("keys-rows");
  body.replaceChildren();
  for (const k of keys) {
    const tr = document.createElement("tr");
    tr.dataset.keyId = k.id;
    const state = k.revoked_at ? "revoked" : "active";
    tr.append(cell(k.name), cell(k.prefix), cell(names.get(k.principal_id) ?? k.principal_id),
      cell(k.scopes.join(", "), "wrap"), cell(time(k.last_used_at)), cell(state));
    const td = document.createElement("td");
    if (!k.revoked_at) {
      const revoke = document.createElement("button");
      revoke.type = "button";
      revoke.className = "secondary";
      revoke.textContent = "Revoke";
      revoke.setAttribute("aria-label", `Revoke ${k.name}`);
      revoke.addEventListener("click", async () => {
        try {
          await api(`/v1/keys/${k.id}`, { method: "DELETE" });
        } catch (err) {
          $("keys-error").textContent = explain(err, "tenant:admin");
        }
        loadKeys();
      });
      td.append(revoke);
    }
    tr.append(td);
    body.append(tr);
  }
}

async function createPrincipal(e) {
  e.preventDefault();
  const form = new FormData($("principal-form"));
  try {
    const created = await api("/v1/principals", {
      method: "POST",
      body: { name: String(form.get("name")), kind: String(form.get("kind")), roles: [String(form.get("role"))] },
    });
    $("principal-form").reset();
    // The next key is most likely for the principal just made.
    await loadKeys();
    $("key-principal").value = created.id;
  } catch (err) {
    $("keys-error").textContent = explain(err, "tenant:admin");
  }
}

async function createKey(e) {
  e.preventDefault();
  const form = new FormData($("key-form"));
  try {
    const created = await api("/v1/keys", {
      method: "POST",
      body: { name: String(form.get("name")), principal_id: String(form.get("principal_id")) },
    });
    $("key-secret-value").textContent = created.secret;
    $("key-secret").hidden = false;
    $("key-form").reset();
  } catch (err) {
    $("keys-error").textContent = explain(err, "tenant:admin");
  }
  loadKeys();
}

// ---- pages, sign-in ----------------------------------------------------------------

function allowed(page) {
  const link = $("nav").querySelector(`a[href="#${page}"]`);
  return !!link && me?.scopes.includes(link.dataset.scope);
}

function show(page) {
  for (const id of ["login", "none", ...pages]) $(id).hidden = id !== page;
  for (const a of $("nav").querySelectorAll("a")) {
    if (a.getAttribute("href") === `#${page}`) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (page === "calls") {
    startCalls();
    loadChart();
  }
  if (page === "approvals") startApprovals();
  if (page === "audit" && audit.rows.length === 0 && !audit.query) searchAudit();
  if (page === "runs") loadRuns();
  if (page === "tools") loadTools();
  if (page === "keys") { $("key-secret").hidden = true; loadKeys(); }
}

function route() {
  if (!key()) {
    $("nav").hidden = true;
    $("signout").hidden = true;
    show("login");
    $("key").focus();
    return;
  }
  $("nav").hidden = false;
  $("signout").hidden = false;
  for (const a of $("nav").querySelectorAll("a")) a.hidden = !allowed(a.getAttribute("href").slice(1));
  $("who").textContent = me ? `${me.principal} · ${me.tenant}` : "";
  const page = location.hash.slice(1);
  const first = pages.find(allowed);
  if (allowed(page)) show(page);
  else if (first) show(first);
  else {
    $("none-text").textContent = `This key (${me?.scopes.join(", ") || "no scopes"}) may use tools but ` +
      "none of the console's pages: they need tools:invoke, audit:read, approvals:decide, agents:run or tenant:admin.";
    show("none");
  }
}

function signOut(message) {
  sessionStorage.removeItem(KEY);
  me = null;
  calls.stop?.();
  approvals.stop?.();
  runs.stop?.();
  calls.stop = approvals.stop = runs.stop = null;
  // Nothing the last key could read stays on the page for the next one.
  calls.rows = [];
  audit.rows = [];
  audit.query = "";
  audit.cursor = null;
  clearTimeout(tools.timer);
  clearTimeout(chart.timer);
  clearTimeout(chart.soon);
  chart.soon = null;
  $("chart-svg").replaceChildren();
  $("chart-caption").textContent = "Calls per minute, last hour";
  $("upstreams-admin").hidden = true;
  stopEditing();
  for (const id of ["calls-rows", "audit-rows", "approvals-list", "runs-rows", "run-steps", "keys-rows",
    "tools-rows", "upstreams-rows"]) {
    $(id).replaceChildren();
  }
  $("run").hidden = true;
  $("key-secret").hidden = true;
  $("key-secret-value").textContent = "";
  $("who").textContent = "";
  for (const id of ["audit-detail", "audit-verified", "calls-error", "audit-error", "approvals-error"]) {
    $(id).textContent = "";
  }
  $("audit-detail").hidden = true;
  $("audit-form").reset();
  $("calls-state").textContent = "connecting…";
  $("login-error").textContent = message ?? "";
  route();
}

// ---- single sign-on: OIDC authorization code with PKCE, when the gateway names a provider ----
// The page is a public client: no secret; the verifier and state stay in this tab. The
// access token is then used as a key is (`Authorization: Bearer`), checked by the gateway
// as any JWT.

let oidc = null;

const base64url = (bytes) =>
  btoa(String.fromCharCode(...new Uint8Array(bytes))).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
const randomToken = () => base64url(crypto.getRandomValues(new Uint8Array(32)));
const redirectUri = () => `${location.origin}/console/`;

async function discover() {
  const response = await fetch(`${oidc.issuer.replace(/\/$/, "")}/.well-known/openid-configuration`);
  if (!response.ok) throw new Error(`the provider's discovery answered ${response.status}`);
  return response.json();
}

async function startSso() {
  try {
    const meta = await discover();
    const verifier = randomToken();
    const state = randomToken();
    const challenge = base64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
    sessionStorage.setItem(SSO, JSON.stringify({ state, verifier, token_endpoint: meta.token_endpoint }));
    const url = new URL(meta.authorization_endpoint);
    const params = {
      response_type: "code", client_id: oidc.client_id, redirect_uri: redirectUri(), scope: oidc.scope,
      state, code_challenge: challenge, code_challenge_method: "S256",
    };
    if (oidc.resource) params.resource = oidc.resource;
    for (const [name, value] of Object.entries(params)) url.searchParams.set(name, value);
    location.assign(url.toString());
  } catch (err) {
    $("login-error").textContent = `Single sign-on is unavailable: ${err.message}`;
  }
}

/** Completes a sign-on the provider sent the browser back from; false when there is none. */
async function finishSso() {
  const params = new URLSearchParams(location.search);
  if (!params.has("code") && !params.has("error")) return false;
  // The code is single-use and must not stay in the address bar or history.
  history.replaceState(null, "", `/console/${location.hash}`);
  const pending = JSON.parse(sessionStorage.getItem(SSO) || "null");
  sessionStorage.removeItem(SSO);
  try {
    if (params.has("error")) {
      throw new Error(`the provider said ${params.get("error_description") || params.get("error")}`);
    }
    if (!pending || pending.state !== params.get("state")) {
      throw new Error("this answer does not belong to a sign-in started here");
    }
    const body = new URLSearchParams({
      grant_type: "authorization_code", code: params.get("code"), redirect_uri: redirectUri(),
      client_id: oidc.client_id, code_verifier: pending.verifier,
    });
    if (oidc.resource) body.set("resource", oidc.resource);
    const response = await fetch(pending.token_endpoint, { method: "POST", body });
    const tokens = await response.json().catch(() => ({}));
    if (!response.ok || !tokens.access_token) {
      throw new Error(tokens.error_description || tokens.error || `the token endpoint answered ${response.status}`);
    }
    sessionStorage.setItem(KEY, tokens.access_token);
    me = await api("/v1/me");
  } catch (err) {
    sessionStorage.removeItem(KEY);
    $("login-error").textContent = err.status === 401
      ? "The gateway did not accept this sign-in."
      : `Single sign-on failed: ${err.message}`;
  }
  route();
  return true;
}

$("login-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const candidate = $("key").value.trim();
  sessionStorage.setItem(KEY, candidate);
  try {
    me = await api("/v1/me");
  } catch (err) {
    sessionStorage.removeItem(KEY);
    $("login-error").textContent = err.status === 401 ? "This key was not accepted." : err.message;
    return;
  }
  $("key").value = "";
  $("login-error").textContent = "";
  route();
});
$("signout").addEventListener("click", () => signOut());
$("key-form").addEventListener("submit", createKey);
$("principal-form").addEventListener("submit", createPrincipal);
$("upstream-form").addEventListener("submit", saveUpstream);
$("upstream-cancel").addEventListener("click", stopEditing);
$("calls-filter").addEventListener("input", renderCalls);
$("audit-form").addEventListener("submit", (e) => {
  e.preventDefault();
  searchAudit();
});
$("audit-more").addEventListener("click", () => searchAudit(true));
$("runs-more").addEventListener("click", () => loadRuns(true));
$("runs-status").addEventListener("change", () => loadRuns());
$("audit-json").addEventListener("click", () =>
  download("audit.json", "application/json", JSON.stringify(audit.rows, null, 2)));
$("audit-csv").addEventListener("click", () => download("audit.csv", "text/csv", csv(audit.rows)));
$("audit-verify").addEventListener("click", verifyChain);
window.addEventListener("hashchange", route);
$("sso-button").addEventListener("click", startSso);

async function boot() {
  const settings = await fetch("/console/config.json").then((r) => r.json()).catch(() => ({}));
  oidc = settings.oidc ?? null;
  if (oidc) {
    $("sso-button").textContent = oidc.label;
    $("sso").hidden = false;
    if (await finishSso()) return;
  }
  // A tab reloaded while signed in asks who it is again.
  if (key()) {
    api("/v1/me").then((who) => { me = who; route(); }).catch(() => signOut());
  } else {
    route();
  }
}
boot();
