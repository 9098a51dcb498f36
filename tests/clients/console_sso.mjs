// Signs in to the console at BASE through its single sign-on, in Debian's Chromium, as a
// person would, for tests/e2e/console.rs:
//   node console_sso.mjs BASE SHOTS_DIR
// The provider (oidc_provider.mjs) shows its own login and consent pages. "rita" (tenant
// "default") gets in and reads the audit; the address bar keeps no code; the tab holds an
// access token (a JWT), not a key. "other-bob" (a tenant the gateway does not know) is
// turned away with a message. Prints what it saw as JSON; throws at the first
// expectation that fails.
import { launch } from "./chromium.mjs";

const [base, shots] = process.argv.slice(2);
const seen = {};

async function signIn(browser, login) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`${base}/console`);
  await page.getByRole("button", { name: "Sign in with single sign-on" }).click();
  // The provider's pages: any login name and password, then consent.
  await page.locator('input[name="login"]').fill(login);
  await page.locator('input[name="password"]').fill("any password");
  await page.locator('button[type="submit"]').click();
  await page.locator('button[type="submit"]', { hasText: "Continue" }).click();
  await page.waitForURL(`${base}/console/**`);
  return { page, errors };
}

const browser = await launch();
try {
  const { page, errors } = await signIn(browser, "rita");
  await page.locator("#who", { hasText: "default" }).waitFor({ timeout: 10000 });
  seen.who = await page.locator("#who").innerText();
  seen.url = page.url();
  if (seen.url.includes("code=")) throw new Error(`the code stayed in the address bar: ${seen.url}`);
  seen.token_parts = (await page.evaluate(() => sessionStorage.getItem("toolgate.key")))?.split(".").length;
  await page.getByRole("link", { name: "Audit" }).click();
  await page.locator("#audit-rows tr").first().waitFor({ timeout: 10000 });
  seen.audit_rows = await page.locator("#audit-rows tr").count();
  await page.screenshot({ path: `${shots}/console-sso.png`, fullPage: true });
  seen.nav = (await page.locator("#nav a:not([hidden])").allInnerTexts()).map((t) => t.trim());
  if (errors.length) throw new Error(`page errors: ${errors.join("; ")}`);

  const stranger = await signIn(browser, "other-bob");
  await stranger.page.locator("#login-error", { hasText: "did not accept" }).waitFor({ timeout: 10000 });
  seen.refused = await stranger.page.locator("#login-error").innerText();
  seen.refused_nav_hidden = await stranger.page.locator("#nav").isHidden();
  seen.refused_token = await stranger.page.evaluate(() => sessionStorage.getItem("toolgate.key"));
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));
