"""Opens a gpumem viz page from disk in Debian's headless chromium (selenium, chromedriver), with
the network blocked, and checks it.
Usage: python3 browser_test.py PAGE.html EXPECT.json SHOT.png CLICKED.json
EXPECT.json: {"peak_allocated_bytes": N, "peak_reserved_bytes": N, "peak_seq": N,
              "top_tensor": "name", "top_class": "class", "segments": N}
CLICKED.json (written): what a click on a point that is not the peak showed, for the caller to
check against the database: {"seq": N, "name": "...", "birth": N, "death": N}."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from browser_open import fail, num, run  # noqa: E402

page_file, expect_file, shot, clicked_file = sys.argv[1:5]
with open(expect_file, encoding="utf-8") as f:
    expect = json.load(f)


def check(page):
    peak = num(page.attr("#peak-marker", "data-peak"))
    if peak != expect["peak_allocated_bytes"]:
        fail(f"timeline peak {peak} != report {expect['peak_allocated_bytes']}")
    rmax = num(page.attr("#reserved-line", "data-max"))
    if rmax != expect["peak_reserved_bytes"]:
        fail(f"reserved line's max {rmax} != report's peak reserved {expect['peak_reserved_bytes']}")
    # the line is drawn from the same buckets: its highest point (smallest y) is the max
    pts = page.attr("#reserved-line", "points").split()
    if len(pts) < 2:
        fail(f"the reserved line has {len(pts)} points")

    # the toggle: stacked by phase first, by tensor class after a click, and back
    def layers():
        return page.eval_all("#stack polygon.layer", "ps => ps.map(p => p.getAttribute('data-layer'))")
    if page.attr("#stack", "data-by") != "phase":
        fail("the timeline is not stacked by phase at first")
    by_phase = layers()
    if "forward" not in by_phase or "backward" not in by_phase:
        fail(f"phase layers: {', '.join(map(str, by_phase))}")
    page.click("#by-class")
    if page.attr("#stack", "data-by") != "class":
        fail("the toggle did not stack by class")
    by_class = layers()
    if expect["top_class"] not in by_class:
        fail(f"class layers {', '.join(map(str, by_class))} lack {expect['top_class']}")
    if by_class == by_phase:
        fail("the class layers are the phase layers")
    legend = page.text("#legend")
    if expect["top_class"] not in legend:
        fail(f"the legend does not name {expect['top_class']}")

    page.click("#peak-marker")
    live = page.text("#live-table")
    if expect["top_tensor"] not in live:
        fail(f"clicking the peak does not show {expect['top_tensor']}")

    # a click on a point that is not the peak: a quarter of the way in
    box = page.box("#timeline")
    page.mouse_click(box["x"] + box["width"] * 0.25, box["y"] + 100)
    seq = num(page.attr("#live-table", "data-seq"))
    if seq == expect.get("peak_seq"):
        fail("the click a quarter of the way in landed on the peak")
    rows = page.eval_all("#live-table tr.live-row", """rs => rs.map(r => ({
        name: r.cells[0].textContent, birth: Number(r.dataset.birth), death: Number(r.dataset.death) }))""")
    if not rows:
        fail(f"nothing shown live at seq {seq}")
    r0 = rows[0]
    if not (r0["birth"] <= seq and (r0["death"] == 0 or r0["death"] > seq)):
        fail(f"{r0['name']} ({r0['birth']}..{r0['death']}) shown at seq {seq}")
    with open(clicked_file, "w", encoding="utf-8") as f:
        json.dump({"seq": seq, "name": r0["name"], "birth": r0["birth"], "death": r0["death"]}, f)

    root = num(page.attr("#flame-peak rect.flame-root", "data-bytes"))
    if root != expect["peak_allocated_bytes"]:
        fail(f"the peak icicle's root {root} != peak allocated {expect['peak_allocated_bytes']}")
    troot = num(page.attr("#flame-total rect.flame-root", "data-bytes"))
    if not troot >= root:
        fail(f"the total icicle's root {troot} < the peak's {root}")

    nseg = page.count("rect.segment", within="svg.segmap[data-reason=peak]")
    if nseg != expect["segments"]:
        fail(f"segment map has {nseg} segments, the peak snapshot {expect['segments']}")
    classed = page.count("svg.segmap[data-reason=peak] rect.block[data-state='1']:not([data-class='-1'])")
    if not classed:
        fail("no allocated block of the peak segment map has a tensor class")

    page.finish(shot)
    print(f"ok: peak {peak}, reserved max {rmax}, layers by phase [{','.join(map(str, by_phase))}] / "
          f"by class ({len(by_class)}), top tensor {expect['top_tensor']}, at seq {seq} {r0['name']} live, "
          f"icicle root {root}, {nseg} segments ({classed} blocks classed), screenshot {shot}")


run(page_file, check)
