// Opens a gpumem viz page from disk in Debian's chromium (playwright-core), with the network
// blocked, and checks it. Usage: node browser_test.js PAGE.html EXPECT.json SHOT.png
// EXPECT.json: {"peak_allocated_bytes": N, "top_tensor": "name", "segments": N}
"use strict";
const { chromium } = require("playwright-core");
const fs = require("fs");
const path = require("path");
const [page_file, expect_file, shot] = process.argv.slice(2);
const expect = JSON.parse(fs.readFileSync(expect_file, "utf8"));
function fail(msg) { console.error("FAIL: " + msg); process.exit(1); }
(async () => {
  const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
  const ctx = await browser.newContext({ offline: true });
  const page = await ctx.newPage();
  const errors = [], requests = [];
  page.on("console", m => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", e => errors.push(String(e)));
  const url = "file://" + path.resolve(page_file);
  page.on("request", r => { if (r.url() !== url) requests.push(r.url()); });
  await ctx.route("**/*", r => (r.request().url() === url ? r.continue() : r.abort()));
  await page.goto(url);
  const peak = Number(await page.getAttribute("#peak-marker", "data-peak"));
  if (peak !== expect.peak_allocated_bytes) fail(`timeline peak ${peak} != report ${expect.peak_allocated_bytes}`);
  await page.click("#peak-marker");
  const live = await page.textContent("#live-table");
  if (!live.includes(expect.top_tensor)) fail(`clicking the peak does not show ${expect.top_tensor}`);
  const nseg = await page.locator("svg.segmap[data-reason=peak]").first().locator("rect.segment").count();
  if (nseg !== expect.segments) fail(`segment map has ${nseg} segments, the peak snapshot ${expect.segments}`);
  await page.screenshot({ path: shot, fullPage: true });
  if (errors.length) fail("console errors: " + errors.join("; "));
  if (requests.length) fail("requests: " + requests.join(" "));
  console.log(`ok: peak ${peak}, top tensor ${expect.top_tensor}, ${nseg} segments, screenshot ${shot}`);
  await browser.close();
})().catch(e => fail(String(e)));
