// Debian's Chromium, headless, through playwright-core: the one browser the browser
// tests use (CHROMIUM overrides the path).
import { chromium } from "playwright-core";

export function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
}
