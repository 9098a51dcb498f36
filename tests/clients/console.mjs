// Drives the console at BASE in Debian's Chromium (through playwright-core), as a person
// would, for tests/e2e/console.rs:
//   node console.mjs BASE ADMIN_KEY REVIEWER_KEY REVIEWER_KEY_ID MEMBER_KEY SHOTS_DIR
// The reviewer signs in, watches a call the admin makes over REST appear live, finds it
// in the audit, verifies the chain, approves the admin's held call (which then runs);
// a member key without audit:read is told so; the reviewer's key is revoked and the
// next action signs the console out. Writes a screenshot per page to SHOTS_DIR and
// prints what it saw as JSON; throws (exit 1) at the first expectation that fails.
import { launch } from "./chromium.mjs";

const [base, adminKey, reviewerKey, reviewerKeyId, memberKey, shots] = process.argv.slice(2);
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

  // A member without audit:read is told what the key lacks.
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByLabel("API key").fill(memberKey);
  await page.keyboard.press("Enter");
  await page.getByRole("link", { name: "Live calls" }).click();
  await page.locator("#calls-state", { hasText: "audit:read" }).waitFor();
  seen.member = await page.locator("#calls-state").innerText();
  seen.memberRows = await page.locator("#calls-rows tr").count();
  await shot("member");

  // The reviewer again; its key revoked, the next action signs the console out.
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByLabel("API key").fill(reviewerKey);
  await page.keyboard.press("Enter");
  await page.getByRole("link", { name: "Live calls" }).click();
  await page.locator("#calls-state", { hasText: "live" }).waitFor();
  const revoked = await admin(`/v1/keys/${reviewerKeyId}`, { method: "DELETE" });
  if (!revoked.ok) throw new Error(`revoke: ${revoked.status}`);
  // Opening the audit reads it: refused, and the console asks to sign in again.
  await page.getByRole("link", { name: "Audit" }).click();
  await page.getByText("Your key was refused: sign in again.").waitFor();
  seen.revoked = await page.locator("#login").isVisible();
  await shot("revoked");

  // Phone width: the console still fits.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.getByLabel("API key").fill(memberKey);
  await page.keyboard.press("Enter");
  await page.getByRole("link", { name: "Live calls" }).click();
  await page.locator("#calls-state").waitFor();
  seen.phoneOverflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
  await shot("phone");
  seen.errors = errors;
  console.log(JSON.stringify(seen));
} finally {
  await browser.close();
}
