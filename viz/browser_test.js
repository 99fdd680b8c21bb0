// Opens a gpumem viz page from disk in Debian's chromium (playwright-core), with the network
// blocked, and checks it. Usage: node browser_test.js PAGE.html EXPECT.json SHOT.png CLICKED.json
// EXPECT.json: {"peak_allocated_bytes": N, "peak_reserved_bytes": N, "top_tensor": "name",
//               "top_class": "class", "segments": N}
// CLICKED.json (written): what a click on a point that is not the peak showed, for the caller to
// check against the database: {"seq": N, "name": "...", "birth": N, "death": N}.
"use strict";
const fs = require("fs");
const { fail, openOffline } = require("./browser_open");
const [page_file, expect_file, shot, clicked_file] = process.argv.slice(2);
const expect = JSON.parse(fs.readFileSync(expect_file, "utf8"));
(async () => {
  const { page, finish } = await openOffline(page_file);

  const peak = Number(await page.getAttribute("#peak-marker", "data-peak"));
  if (peak !== expect.peak_allocated_bytes) fail(`timeline peak ${peak} != report ${expect.peak_allocated_bytes}`);
  const rmax = Number(await page.getAttribute("#reserved-line", "data-max"));
  if (rmax !== expect.peak_reserved_bytes) fail(`reserved line's max ${rmax} != report's peak reserved ${expect.peak_reserved_bytes}`);
  // the line is drawn from the same buckets: its highest point (smallest y) is the max
  const pts = (await page.getAttribute("#reserved-line", "points")).trim().split(/\s+/);
  if (pts.length < 2) fail(`the reserved line has ${pts.length} points`);

  // the toggle: stacked by phase first, by tensor class after a click, and back
  const layers = async () => page.$$eval("#stack polygon.layer", ps => ps.map(p => p.getAttribute("data-layer")));
  if ((await page.getAttribute("#stack", "data-by")) !== "phase") fail("the timeline is not stacked by phase at first");
  const byPhase = await layers();
  if (!byPhase.includes("forward") || !byPhase.includes("backward")) fail(`phase layers: ${byPhase.join(", ")}`);
  await page.click("#by-class");
  if ((await page.getAttribute("#stack", "data-by")) !== "class") fail("the toggle did not stack by class");
  const byClass = await layers();
  if (!byClass.includes(expect.top_class)) fail(`class layers ${byClass.join(", ")} lack ${expect.top_class}`);
  if (byClass.join() === byPhase.join()) fail("the class layers are the phase layers");
  const legend = await page.textContent("#legend");
  if (!legend.includes(expect.top_class)) fail(`the legend does not name ${expect.top_class}`);

  await page.click("#peak-marker");
  const live = await page.textContent("#live-table");
  if (!live.includes(expect.top_tensor)) fail(`clicking the peak does not show ${expect.top_tensor}`);

  // a click on a point that is not the peak: a quarter of the way in
  const box = await page.locator("#timeline").boundingBox();
  await page.mouse.click(box.x + box.width * 0.25, box.y + 100);
  const seq = Number(await page.getAttribute("#live-table", "data-seq"));
  if (seq === expect.peak_seq) fail("the click a quarter of the way in landed on the peak");
  const rows = await page.$$eval("#live-table tr.live-row", rs => rs.map(r => ({
    name: r.cells[0].textContent, birth: Number(r.dataset.birth), death: Number(r.dataset.death) })));
  if (!rows.length) fail(`nothing shown live at seq ${seq}`);
  const r0 = rows[0];
  if (!(r0.birth <= seq && (r0.death === 0 || r0.death > seq))) fail(`${r0.name} (${r0.birth}..${r0.death}) shown at seq ${seq}`);
  fs.writeFileSync(clicked_file, JSON.stringify({ seq, name: r0.name, birth: r0.birth, death: r0.death }));

  const root = Number(await page.getAttribute("#flame-peak rect.flame-root", "data-bytes"));
  if (root !== expect.peak_allocated_bytes) fail(`the peak icicle's root ${root} != peak allocated ${expect.peak_allocated_bytes}`);
  const troot = Number(await page.getAttribute("#flame-total rect.flame-root", "data-bytes"));
  if (!(troot >= root)) fail(`the total icicle's root ${troot} < the peak's ${root}`);

  const nseg = await page.locator("svg.segmap[data-reason=peak]").first().locator("rect.segment").count();
  if (nseg !== expect.segments) fail(`segment map has ${nseg} segments, the peak snapshot ${expect.segments}`);
  const classed = await page.locator("svg.segmap[data-reason=peak] rect.block[data-state='1']:not([data-class='-1'])").count();
  if (!classed) fail("no allocated block of the peak segment map has a tensor class");

  await finish(shot);
  console.log(`ok: peak ${peak}, reserved max ${rmax}, layers by phase [${byPhase}] / by class (${byClass.length}), ` +
              `top tensor ${expect.top_tensor}, at seq ${seq} ${r0.name} live, icicle root ${root}, ${nseg} segments ` +
              `(${classed} blocks classed), screenshot ${shot}`);
})().catch(e => fail(String(e)));
