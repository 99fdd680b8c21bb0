// What the browser tests share: a gpumem viz page opened from disk in Debian's chromium
// (playwright-core) with the network blocked, console errors and any request collected, and the
// end of a check (screenshot, then fail on an error or a request).
"use strict";
const { chromium } = require("playwright-core");
const path = require("path");

function fail(msg) { console.error("FAIL: " + msg); process.exit(1); }

// Resolves to {browser, page, finish}; finish(shot) takes a full-page screenshot with the
// pointer out of the way, fails on console errors or requests, and closes the browser.
async function openOffline(pageFile) {
  const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
  const ctx = await browser.newContext({ offline: true });
  const page = await ctx.newPage();
  const errors = [], requests = [];
  page.on("console", m => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", e => errors.push(String(e)));
  const url = "file://" + path.resolve(pageFile);
  page.on("request", r => { if (r.url() !== url) requests.push(r.url()); });
  await ctx.route("**/*", r => (r.request().url() === url ? r.continue() : r.abort()));
  await page.goto(url);
  const finish = async shot => {
    await page.mouse.move(0, 0); // no tooltip in the screenshot
    await page.screenshot({ path: shot, fullPage: true });
    if (errors.length) fail("console errors: " + errors.join("; "));
    if (requests.length) fail("requests: " + requests.join(" "));
    await browser.close();
  };
  return { browser, page, finish };
}

module.exports = { fail, openOffline };
