// Drives the console at BASE in Debian's Chromium (through playwright-core), as people
// would, for tests/e2e/console.rs:
//   node console.mjs BASE ADMIN_KEY REVIEWER_KEY REVIEWER_KEY_ID MEMBER_KEY AGENT_ID UPSTREAM_URL SHOTS_DIR OTHER_TENANT_KEY
// A reviewer signs in, watches a call the admin makes over REST appear live, finds it in
// the audit, verifies the chain, approves the admin's held call (which then runs). The
// admin, in another browser context, follows an agent run to its end, adds an upstream
// MCP server and sees it connect with its tools, edits it to allow one tool, creates a key
// (secret shown once) and revokes the reviewer's: the reviewer's next action signs its
// console out. A member key sees only the tools page and nothing the last key saw; another
// tenant's admin sees none of this tenant's calls, runs, keys, upstreams or tools. Writes a
// screenshot per page to SHOTS_DIR and prints what it saw as JSON; throws (exit 1) at
// the first expectation that fails.
import { launch } from "./chromium.mjs";

const [base, adminKey, reviewerKey, reviewerKeyId, memberKey, agentId, upstreamUrl, shots, otherKey] =
  process.argv.slice(2);
const seen = {};
const admin = (path, init = {}) =>
  fetch(base + path, {
    ...init,
    headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json", ...(init.headers || {}) },
  });

const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const shot = (name) => page.screenshot({ path: `${shots}/console-${name}.png`, fullPage: true });

  // Sign in: a wrong key is refused, the reviewer's is taken.
  await page.goto(`${base}/console`);
  await page.getByLabel("API key").fill("tg_not-a-key");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByText("This key was not accepted.").waitFor();
  await shot("login");
  await page.getByLabel("API key").fill(reviewerKey);
  await page.keyboard.press("Enter");
  await page.locator("#calls-state", { hasText: "live" }).waitFor();

  // A call made over REST appears live.
  const invoked = await (await admin("/v1/tools/echo/invoke", {
    method: "POST",
    body: JSON.stringify({ arguments: { message: "seen live" } }),
  })).json();
  const row = page.locator(`#calls-rows tr[data-call-id="${invoked.call_id}"]`);
  await row.waitFor({ timeout: 10000 });
  seen.live = await row.innerText();
  // The chart of the last hour counts it (it reloads a few seconds after calls arrive).
  await page.locator("#chart-svg rect.bar-ok").first().waitFor({ timeout: 15000 });
  seen.chart = await page.locator("#chart-caption").innerText();
  await shot("calls");

  // Clicked, it opens in the audit; the chain verifies.
  await row.click();
  await page.locator(`#audit-rows tr[data-call-id="${invoked.call_id}"]`).waitFor();
  await page.locator("#audit-detail").waitFor();
  seen.detail = JSON.parse(await page.locator("#audit-detail").innerText());
  await page.getByRole("button", { name: "Verify chain" }).click();
  await page.locator(".verified-true").waitFor();
  seen.verified = await page.locator("#audit-verified").innerText();
  await shot("audit");

  // The admin's high-risk call waits; the reviewer approves it; it runs.
  const held = await admin("/v1/tools/execute_command/invoke", {
    method: "POST",
    body: JSON.stringify({ arguments: { command: "echo approved-in-the-console" } }),
  });
  if (held.status !== 202) throw new Error(`the call was not held: ${held.status}`);
  const { approval_id, status_url } = await held.json();
  await page.getByRole("link", { name: "Approvals" }).click();
  const card = page.locator(`li[data-approval-id="${approval_id}"]`);
  await card.waitFor({ timeout: 10000 });
  seen.card = await card.innerText();
  await shot("approvals");
  await card.getByLabel("Reason").fill("checked in the console");
  await card.getByRole("button", { name: "Approve" }).click();
  await card.waitFor({ state: "detached" });
  let outcome;
  for (let i = 0; i < 100; i++) {
    outcome = await (await admin(status_url)).json();
    if (outcome.status === "completed") break;
    await new Promise((r) => setTimeout(r, 100));
  }
  seen.released = outcome;

  // The admin, in a browser of its own: every page, an agent run followed to its end.
  const adminContext = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const adminPage = await adminContext.newPage();
  adminPage.on("pageerror", (e) => errors.push(String(e)));
  await adminPage.goto(`${base}/console`);
  await adminPage.getByLabel("API key").fill(adminKey);
  await adminPage.keyboard.press("Enter");
  await adminPage.getByRole("link", { name: "Keys" }).waitFor();
  const started = await (await admin(`/v1/agents/${agentId}/runs`, {
    method: "POST",
    body: JSON.stringify({ input: "say hello through echo", wait_secs: 0 }),
  })).json();
  await adminPage.getByRole("link", { name: "Runs" }).click();
  // Whether the streamed answer showed as it was written (a line that later gives way).
  await adminPage.evaluate(() => {
    window.sawTyping = false;
    new MutationObserver(() => {
      if (document.querySelector('#run-steps li[data-type="model_delta"]')) window.sawTyping = true;
    }).observe(document.getElementById("run-steps"), { childList: true, subtree: true, characterData: true });
  });
  await adminPage.locator(`#runs-rows tr[data-run-id="${started.id}"]`).click();
  await adminPage.locator('#run-steps li[data-type="run_finished"]').waitFor({ timeout: 20000 });
  await adminPage.locator('#run-status[data-status="completed"]').waitFor();
  seen.runSteps = await adminPage.locator("#run-steps li").evaluateAll((els) => els.map((e) => e.dataset.type));
  seen.runAnswer = await adminPage.locator('#run-steps li[data-type="model_message"]').last().innerText();
  seen.sawTyping = await adminPage.evaluate(() => window.sawTyping);
  // The list filters by status: the run completed, so it is not among the failed ones.
  const listed = async (status) => {
    await adminPage.locator("#runs-status").selectOption(status);
    await adminPage.locator(`#runs-rows[data-status="${status}"]`).waitFor({ state: "attached" });
    return adminPage.locator(`#runs-rows tr[data-run-id="${started.id}"]`).count();
  };
  seen.runListedAs = { failed: await listed("failed"), completed: await listed("completed") };
  await adminPage.screenshot({ path: `${shots}/console-runs.png`, fullPage: true });

  // An upstream added in the page connects; its tools join the list.
  await adminPage.getByRole("link", { name: "Tools" }).click();
  const upstreamForm = adminPage.locator("#upstream-form");
  await upstreamForm.getByLabel("Name", { exact: true }).fill("fx");
  await upstreamForm.getByLabel("URL", { exact: true }).fill(upstreamUrl);
  await adminPage.getByRole("button", { name: "Add upstream" }).click();
  await adminPage.locator('#upstreams-rows tr[data-upstream="fx"][data-state="connected"]').waitFor({ timeout: 20000 });
  await adminPage.locator('#tools-rows tr[data-tool="fx__add"]').waitFor({ timeout: 20000 });
  // The row is drawn from its own fetch, which may have seen the upstream connected
  // before it listed its tools: wait for the row that names them.
  const upstreamRow = adminPage.locator('#upstreams-rows tr[data-upstream="fx"]', { hasText: "add" });
  await upstreamRow.waitFor({ timeout: 20000 });
  seen.upstream = await upstreamRow.innerText();
  await adminPage.screenshot({ path: `${shots}/console-tools.png`, fullPage: true });

  // The upstream pulls a rug (changes `add`): withheld, shown waiting; approved in the page.
  const pulled = await admin("/v1/tools/fx__rug_pull/invoke", { method: "POST", body: JSON.stringify({ arguments: {} }) });
  if (pulled.status !== 200) throw new Error(`rug_pull: ${pulled.status}`);
  for (let i = 0; i < 100; i++) {
    const listed = await (await admin("/v1/tools/fx__add")).json();
    if (listed.status === 404) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const reloadTools = async () => {
    await adminPage.getByRole("link", { name: "Keys" }).click();
    await adminPage.getByRole("link", { name: "Tools" }).click();
  };
  await reloadTools();
  const waiting = adminPage.locator('#definitions-rows tr[data-definition="fx__add"]');
  await waiting.waitFor({ timeout: 10000 });
  seen.waitingDefinition = await waiting.innerText();
  await adminPage.screenshot({ path: `${shots}/console-definitions.png`, fullPage: true });
  await waiting.getByRole("button", { name: "Approve the new definition of fx__add" }).click();
  await adminPage.locator("#definitions-waiting").waitFor({ state: "hidden", timeout: 10000 });
  for (let i = 0; i < 100 && !(await adminPage.locator('#tools-rows tr[data-tool="fx__add"]').count()); i++) {
    await reloadTools();
    await new Promise((r) => setTimeout(r, 200));
  }
  await adminPage.locator('#tools-rows tr[data-tool="fx__add"]').waitFor({ timeout: 10000 });

  // Edited to allow one tool: the others leave the list.
  await adminPage.getByRole("button", { name: "Edit fx" }).click();
  await upstreamForm.getByLabel("Allow", { exact: true }).fill("add");
  await adminPage.screenshot({ path: `${shots}/console-upstream-edit.png`, fullPage: true });
  await adminPage.getByRole("button", { name: "Save upstream" }).click();
  await adminPage.locator('#tools-rows tr[data-tool="fx__picture"]').waitFor({ state: "detached", timeout: 20000 });
  await adminPage.locator('#tools-rows tr[data-tool="fx__add"]').waitFor({ timeout: 20000 });
  seen.editedTools = await adminPage.locator('#tools-rows tr[data-tool^="fx__"]').evaluateAll((els) => els.map((e) => e.dataset.tool));
  seen.editButton = await adminPage.locator("#upstream-submit").innerText();

  // Principals and keys: a principal created, a key made for it (its secret shown once),
  // the reviewer's key revoked.
  await adminPage.getByRole("link", { name: "Keys" }).click();
  await adminPage.getByLabel("Principal name").fill("console-made");
  await adminPage.getByLabel("Role").selectOption("member");
  await adminPage.getByRole("button", { name: "Create principal" }).click();
  await adminPage.locator("#key-principal option", { hasText: "console-made" }).waitFor({ state: "attached" });
  seen.keyFor = await adminPage.locator("#key-principal option:checked").innerText();
  await adminPage.locator("#key-form").getByLabel("Name", { exact: true }).fill("made-in-the-console");
  await adminPage.getByRole("button", { name: "Create key" }).click();
  await adminPage.locator("#key-secret").waitFor();
  seen.secret = await adminPage.locator("#key-secret-value").innerText();
  await adminPage.screenshot({ path: `${shots}/console-keys.png`, fullPage: true });
  await adminPage.locator(`#keys-rows tr[data-key-id="${reviewerKeyId}"]`).getByRole("button", { name: /Revoke/ }).click();
  await adminPage.locator(`#keys-rows tr[data-key-id="${reviewerKeyId}"]`, { hasText: "revoked" }).waitFor();

  // The reviewer's next action is refused: the console asks to sign in again.
  // (A background refresh, such as the chart's, may meet the refusal first: then the
  // console has signed out already and there is nothing left to click.)
  const signedOut = () => page.locator("#login").isVisible();
  if (!(await signedOut())) {
    await page.getByRole("link", { name: "Audit" }).click({ timeout: 5000 }).catch(() => {});
  }
  if (!(await signedOut())) {
    await page.getByRole("button", { name: "Search" }).click({ timeout: 5000 }).catch(() => {});
  }
  await page.getByText("Your key was refused: sign in again.").waitFor();
  seen.revoked = await page.locator("#login").isVisible();
  await shot("revoked");

  // A member (tools only): the tools page alone, nothing the reviewer saw.
  await page.getByLabel("API key").fill(memberKey);
  await page.keyboard.press("Enter");
  await page.locator('#tools-rows tr[data-tool="echo"]').waitFor();
  seen.memberLinks = await page.locator("#nav a:visible").allInnerTexts();
  seen.memberUpstreams = await page.locator("#upstreams-admin").isVisible();
  seen.memberRows = await page.locator("#calls-rows tr, #audit-rows tr, #approvals-list li").count();
  await shot("member");

  // Another tenant's admin: every page, none of this tenant's data.
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByLabel("API key").fill(otherKey);
  await page.keyboard.press("Enter");
  await page.getByRole("link", { name: "Live calls" }).click();
  await page.locator("#calls-state", { hasText: "live" }).waitFor();
  const other = {};
  // Each page's rows once its request has been answered.
  const loaded = async (link, path) => {
    const answered = page.waitForResponse((r) => new URL(r.url()).pathname === path);
    await page.getByRole("link", { name: link }).click();
    await answered;
  };
  await page.getByRole("link", { name: "Audit" }).click();
  const searched = page.waitForResponse((r) => new URL(r.url()).pathname === "/v1/audit");
  await page.getByRole("button", { name: "Search" }).click();
  await searched;
  await page.locator("#audit-rows tr").first().waitFor();
  other.audit = await page.locator("#audit-rows tr").allInnerTexts();
  other.calls = await page.locator("#calls-rows tr").allInnerTexts();
  await loaded("Runs", "/v1/runs");
  other.runs = await page.locator("#runs-rows tr").count();
  await loaded("Keys", "/v1/keys");
  await page.locator("#keys-rows tr").first().waitFor();
  other.keys = await page.locator("#keys-rows tr").allInnerTexts();
  await loaded("Tools", "/v1/upstreams");
  await page.locator('#tools-rows tr[data-tool="echo"]').waitFor();
  other.upstreams = await page.locator("#upstreams-rows tr").count();
  other.fxTools = await page.locator('#tools-rows tr[data-tool^="fx__"]').count();
  other.editing = await page.locator("#upstream-drop, #upstream-cancel, #upstream-bearer-help").evaluateAll(
    (els) => els.filter((e) => e.checkVisibility()).map((e) => e.id));
  seen.otherTenant = other;
  await shot("other-tenant");

  // Phone width: the console (signed in as the admin) still fits.
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.setViewportSize({ width: 390, height: 844 });
  await page.getByLabel("API key").fill(adminKey);
  await page.keyboard.press("Enter");
  await page.getByRole("link", { name: "Live calls" }).click();
  await page.locator("#calls-state", { hasText: "live" }).waitFor();
  seen.phoneOverflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
  await shot("phone");
  seen.errors = errors;
  console.log(JSON.stringify(seen));
} finally {
  await browser.close();
}
