// Checks every console page with axe-core (WCAG 2.1 A and AA rules) in Debian's Chromium,
// signed in as an admin who sees every page, and walks the page with the keyboard alone:
//   node a11y.mjs BASE ADMIN_KEY RUN_ID SHOTS_DIR
// Prints, as JSON, each page's violations (rule, impact, how many nodes, the first one)
// and what Tab reached, in order. The context bypasses the console's CSP only so that
// axe's script can be evaluated in the page; the console itself loads nothing else.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { launch } from "./chromium.mjs";

const [base, adminKey, runId, shots] = process.argv.slice(2);
const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
const seen = { pages: {}, tabs: [] };

const browser = await launch();
try {
  const context = await browser.newContext({ bypassCSP: true, viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const check = async (name) => {
    await page.evaluate(axeSource);
    const result = await page.evaluate(() =>
      window.axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } }));
    seen.pages[name] = result.violations.map((v) => ({
      id: v.id, impact: v.impact, nodes: v.nodes.length, first: v.nodes[0]?.target?.join(" "),
      summary: v.nodes[0]?.failureSummary,
    }));
    await page.screenshot({ path: `${shots}/a11y-${name}.png`, fullPage: true });
  };

  await page.goto(`${base}/console`);
  await page.getByLabel("API key").waitFor();
  await check("login");

  // The keyboard alone: the key field has the focus when the page opens; type, Enter;
  // then Tab through the header.
  seen.firstFocus = await page.evaluate(() => document.activeElement?.id ?? "");
  await page.keyboard.type(adminKey);
  await page.keyboard.press("Enter");
  await page.locator("#calls-state", { hasText: "live" }).waitFor();
  // Calls appear as they finish: one made now.
  await fetch(`${base}/v1/tools/echo/invoke`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" },
    body: JSON.stringify({ arguments: { message: "live" } }),
  });
  await page.locator("#calls-rows tr").first().waitFor({ timeout: 10000 });
  await page.locator("#chart-svg rect").first().waitFor({ timeout: 15000 });
  await check("calls");
  await page.evaluate(() => document.activeElement?.blur());
  for (let i = 0; i < 9; i++) {
    await page.keyboard.press("Tab");
    seen.tabs.push(await page.evaluate(() => {
      const e = document.activeElement;
      return e ? (e.getAttribute("aria-label") || e.textContent || e.id || e.tagName).trim() : "";
    }));
  }
  // A nav link taken with Enter shows its page.
  await page.getByRole("link", { name: "Audit" }).focus();
  await page.keyboard.press("Enter");
  await page.locator("#audit-rows tr").first().waitFor();
  seen.auditByKeyboard = await page.locator("#audit").isVisible();
  await page.locator("#audit-rows tr").first().click();
  await page.locator("#audit-detail").waitFor();
  await check("audit");

  await page.getByRole("link", { name: "Approvals" }).click();
  await page.locator("#approvals-list li").first().waitFor();
  await check("approvals");

  await page.getByRole("link", { name: "Runs" }).click();
  await page.locator(`#runs-rows tr[data-run-id="${runId}"]`).click();
  await page.locator('#run-steps li[data-type="run_finished"]').waitFor({ timeout: 20000 });
  await check("runs");

  await page.getByRole("link", { name: "Tools" }).click();
  await page.locator('#tools-rows tr[data-tool="echo"]').waitFor();
  await page.locator("#upstreams-admin").waitFor();
  await check("tools");

  await page.getByRole("link", { name: "Keys" }).click();
  await page.locator("#keys-rows tr").first().waitFor();
  await check("keys");

  seen.errors = errors;
  console.log(JSON.stringify(seen));
} finally {
  await browser.close();
}
