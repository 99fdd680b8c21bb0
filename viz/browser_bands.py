"""Opens the gpumem viz page of a recording with more live allocations than the page draws one by
one (tests/integration/snapshot_app many) in headless chromium, network blocked, and checks that
what the bands draw is bounded by the chart's pixels, not by bands x changes: the points of the
bands' polygons are at most PTS_PX per pixel of the chart's width (the page allows itself 100, and
the band underneath 2; the page before this bound drew 6,658 per pixel, 7.8 M points), yet the
large allocations are still bands of their own, topping out at the red dot, and hovering one
shows its allocation.
Usage: python3 browser_bands.py PAGE.html MIN_BANDS SHOT.png"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from browser_open import fail, run  # noqa: E402

PTS_PX = 110
page_file, min_bands, shot = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t0 = time.monotonic()


def check(page):
    d = page.d
    loaded = time.monotonic() - t0
    if page.attr("#timeline", "data-mode") != "bands":
        fail(f"the page opens as {page.attr('#timeline', 'data-mode')}, not bands")
    r = d.execute_script("""
        const ps = Array.from(document.querySelectorAll("#bands polygon"));
        const pts = ps.reduce((n, p) => n + p.getAttribute("points").trim().split(/\\s+/).length, 0);
        const w = Number(document.querySelector("#plot-clip rect").getAttribute("width"));
        const m = document.getElementById("peak-marker"), px = Number(m.getAttribute("cx"));
        let best = 1e9;
        for (const p of ps.filter(p => p.classList.contains("band"))) {
          const v = p.getAttribute("points").trim().split(/\\s+/).map(s => s.split(",").map(Number));
          for (let i = 0; i + 1 < v.length; i++)
            if (v[i][1] === v[i + 1][1] && Math.min(v[i][0], v[i + 1][0]) - 0.06 <= px && px <= Math.max(v[i][0], v[i + 1][0]) + 0.06)
              best = Math.min(best, v[i][1]);
        }
        return {pts, w, bands: ps.length - (document.querySelector("#bands polygon.band-rest") ? 1 : 0),
                top: best, dot: Number(m.getAttribute("cy")), svg: document.getElementById("timeline").outerHTML.length};""")
    if r["pts"] > PTS_PX * r["w"]:
        fail(f"the bands draw {r['pts']} points on a chart {r['w']} px wide: more than {PTS_PX} per pixel "
             f"({r['pts'] / r['w']:.0f}; the timeline's SVG is {r['svg']} characters)")
    if r["bands"] < min_bands:
        fail(f"{r['bands']} bands drawn one by one, fewer than the {min_bands} allocations of 8 MiB or more")
    if abs(r["top"] - r["dot"]) > 1.5:
        fail(f"the bands under the red dot top out at y {r['top']}, the dot is at {r['dot']}")
    # hovering the largest band shows its allocation
    p = d.execute_script("""
        let e = null;
        for (const b of document.querySelectorAll("#bands polygon.band"))
          if (!e || Number(b.getAttribute("data-bytes")) > Number(e.getAttribute("data-bytes"))) e = b;
        e.scrollIntoView({block: "center"});
        const s = e.ownerSVGElement.getBoundingClientRect();
        /* the pointer moves to whole pixels: one near its hover point that is on the band */
        const hx = Math.round(s.left + Number(e.getAttribute("data-hx"))), hy = Math.round(s.top + Number(e.getAttribute("data-hy")));
        for (const dy of [0, -1, 1, -2, 2]) for (const dx of [0, -2, 2, -4, 4])
          if (document.elementFromPoint(hx + dx, hy + dy) === e) return [hx + dx, hy + dy, e.getAttribute("data-t")];
        return [hx, hy, e.getAttribute("data-t")];""")
    page.mouse_move(p[0], p[1])
    want = d.execute_script("return tensorText(Number(arguments[0])).split('\\n')[0]", p[2])
    tip = page.text("#tip")
    if not tip.startswith(want):
        fail(f"hovering the largest band shows '{tip.splitlines()[0] if tip else ''}', not '{want}'")
    page.finish(shot)
    print(f"ok: {r['bands']} bands, {r['pts']} points on {r['w']} px ({r['pts'] / r['w']:.0f} per px, at most {PTS_PX}), "
          f"SVG {r['svg']} characters, loaded in {loaded:.1f} s, topping out at the red dot; hover '{want}'")


run(page_file, check)
