// Opens a multi-rank gpumem viz page (gpumem viz A.db B.db ...) from disk in Debian's chromium
// (playwright-core), network blocked, and checks the rank lanes.
// Usage: node browser_ranks.js PAGE.html EXPECT.json SHOT.png
// EXPECT.json: {"ranks": [r, ...], "peaks": [peak allocated bytes per rank, same order],
//               "detail_rank": r (the rank with the highest peak, shown in detail below)}
"use strict";
const fs = require("fs");
const { fail, openOffline } = require("./browser_open");
const [page_file, expect_file, shot] = process.argv.slice(2);
const expect = JSON.parse(fs.readFileSync(expect_file, "utf8"));
(async () => {
  const { page, finish } = await openOffline(page_file);

  const lanes = await page.$$eval("svg.rank-lane", ls => ls.map(l => ({
    rank: Number(l.getAttribute("data-rank")), peak: Number(l.getAttribute("data-peak")),
    pts: l.querySelector("polygon.lane-allocated") ? l.querySelector("polygon.lane-allocated").getAttribute("points").trim().split(/\s+/).length : 0 })));
  if (lanes.length !== expect.ranks.length) fail(`${lanes.length} lanes, ${expect.ranks.length} ranks`);
  lanes.forEach((l, i) => {
    if (l.rank !== expect.ranks[i]) fail(`lane ${i} is rank ${l.rank}, expected ${expect.ranks[i]}`);
    if (l.peak !== expect.peaks[i]) fail(`rank ${l.rank}'s lane peaks at ${l.peak}, its report at ${expect.peaks[i]}`);
    if (l.pts < 4) fail(`rank ${l.rank}'s lane has ${l.pts} points`);
  });
  const rows = await page.locator("#rank-table tr.rank-row").count();
  if (rows !== expect.ranks.length) fail(`the rank table has ${rows} rows`);
  const detail = Number(await page.getAttribute("#rank-detail", "data-rank"));
  if (detail !== expect.detail_rank) fail(`detail shown for rank ${detail}, the job's peak is rank ${expect.detail_rank}'s`);
  const peak = Number(await page.getAttribute("#peak-marker", "data-peak"));
  const want = expect.peaks[expect.ranks.indexOf(expect.detail_rank)];
  if (peak !== want) fail(`the detailed timeline peaks at ${peak}, rank ${detail}'s report at ${want}`);
  const box = await page.locator("svg.rank-lane").first().boundingBox();
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  const tip = await page.textContent("#tip");
  if (!/^rank \d+/.test(tip)) fail(`hovering a lane shows '${tip}'`);
  await finish(shot);
  console.log(`ok: ${lanes.length} lanes (ranks ${lanes.map(l => l.rank)}; peaks ${lanes.map(l => l.peak)}), detail rank ${detail}, ` +
              `hover '${tip.split("\n")[0]}', screenshot ${shot}`);
})().catch(e => fail(String(e)));
