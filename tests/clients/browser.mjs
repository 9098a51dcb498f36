// Drives Debian's Chromium (headless, through playwright-core) for the browser tests:
// `node browser.mjs URL SELECTOR SCREENSHOT` opens URL at 1280x800, waits for SELECTOR,
// writes a full-page screenshot to SCREENSHOT and prints, as JSON, the page title and
// the text of every element SELECTOR matches, plus any console errors.
import { launch } from "./chromium.mjs";

const [url, selector, screenshot] = process.argv.slice(2);
const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url, { waitUntil: "load" });
  await page.waitForSelector(selector, { timeout: 20000 });
  const texts = await page.$$eval(selector, (els) => els.map((e) => e.textContent.trim()));
  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(JSON.stringify({ title: await page.title(), texts, errors }));
} finally {
  await browser.close();
}
