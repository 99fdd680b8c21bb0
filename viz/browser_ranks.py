"""Opens a multi-rank gpumem viz page (gpumem viz A.db B.db ...) from disk in Debian's headless
chromium (selenium, chromedriver), network blocked, and checks the rank lanes.
Usage: python3 browser_ranks.py PAGE.html EXPECT.json SHOT.png
EXPECT.json: {"ranks": [r, ...], "peaks": [peak allocated bytes per rank, same order],
              "detail_rank": r (the rank with the highest peak, shown in detail below)}"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from browser_open import fail, num, run  # noqa: E402

page_file, expect_file, shot = sys.argv[1:4]
with open(expect_file, encoding="utf-8") as f:
    expect = json.load(f)


def check(page):
    lanes = page.eval_all("svg.rank-lane", """ls => ls.map(l => ({
        rank: Number(l.getAttribute("data-rank")), peak: Number(l.getAttribute("data-peak")),
        pts: l.querySelector("polygon.lane-allocated") ? l.querySelector("polygon.lane-allocated").getAttribute("points").trim().split(/\\s+/).length : 0 }))""")
    if len(lanes) != len(expect["ranks"]):
        fail(f"{len(lanes)} lanes, {len(expect['ranks'])} ranks")
    for i, lane in enumerate(lanes):
        if lane["rank"] != expect["ranks"][i]:
            fail(f"lane {i} is rank {lane['rank']}, expected {expect['ranks'][i]}")
        if lane["peak"] != expect["peaks"][i]:
            fail(f"rank {lane['rank']}'s lane peaks at {lane['peak']}, its report at {expect['peaks'][i]}")
        if lane["pts"] < 4:
            fail(f"rank {lane['rank']}'s lane has {lane['pts']} points")
    rows = page.count("#rank-table tr.rank-row")
    if rows != len(expect["ranks"]):
        fail(f"the rank table has {rows} rows")
    detail = num(page.attr("#rank-detail", "data-rank"))
    if detail != expect["detail_rank"]:
        fail(f"detail shown for rank {detail}, the job's peak is rank {expect['detail_rank']}'s")
    peak = num(page.attr("#peak-marker", "data-peak"))
    want = (expect["peaks"][expect["ranks"].index(expect["detail_rank"])]
            if expect["detail_rank"] in expect["ranks"] else None)
    if peak != want:
        fail(f"the detailed timeline peaks at {peak}, rank {detail}'s report at {want}")
    box = page.box("svg.rank-lane")
    page.mouse_move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    tip = page.text("#tip")
    if not re.match(r"rank \d+", tip, re.ASCII):
        fail(f"hovering a lane shows '{tip}'")
    page.finish(shot)
    print(f"ok: {len(lanes)} lanes (ranks {','.join(str(l['rank']) for l in lanes)}; "
          f"peaks {','.join(str(l['peak']) for l in lanes)}), detail rank {detail}, "
          f"hover '{tip.split(chr(10))[0]}', screenshot {shot}")


run(page_file, check)
