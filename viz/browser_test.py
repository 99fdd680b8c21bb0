"""Opens a gpumem viz page from disk in Debian's headless chromium (selenium, chromedriver), with
the network blocked, and checks it as a person would use it.
Usage: python3 browser_test.py PAGE.html EXPECT.json OUTDIR CLICKED.json
EXPECT.json: {"peak_allocated_bytes": N, "peak_reserved_bytes": N, "peak_seq": N, "peak_step": N,
              "top_tensor": "name", "top_birth": N (a tensor live at the peak, whose band is
              hovered), "top_stack": ["frame", ...] (its stack in the database, innermost first,
              to main), "top_class": "class", "segments": N,
              "steps": [[step, end seq], ...]}
OUTDIR: page.png (the page as it opens) and page.pdf (as it prints) are written there.
CLICKED.json (written): what a click on a point that is not the peak showed, for the caller to
check against the database: {"seq": N, "name": "...", "birth": N, "death": N}."""
import base64
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from browser_open import fail, num, run  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

page_file, expect_file, outdir, clicked_file = sys.argv[1:5]
with open(expect_file, encoding="utf-8") as f:
    expect = json.load(f)
steps = expect["steps"]


def steps_in(a, b):
    """The step numbers the window [a, b] (seqs) overlaps."""
    out, start = [], 1
    for st, end in steps:
        if start <= b and end >= a:
            out.append(st)
        start = end + 1
    return out


def window(page):
    return num(page.attr("#timeline", "data-first")), num(page.attr("#timeline", "data-last"))


def tip_at(page, sel):
    """Moves the pointer onto the element's hover point (data-hx/hy, in the svg's coordinates,
    or the box's centre) and returns the tooltip's text."""
    p = page.d.execute_script("""
        const e = document.querySelector(arguments[0]);
        e.scrollIntoView({block: "center"});
        const hx = e.getAttribute("data-hx"), hy = e.getAttribute("data-hy");
        if (hx !== null) { const r = e.ownerSVGElement.getBoundingClientRect(); return [r.left + Number(hx), r.top + Number(hy)]; }
        const b = e.getBoundingClientRect(); return [b.left + b.width / 2, b.top + b.height / 2];""", sel)
    page.mouse_move(p[0], p[1])
    hit = page.d.execute_script("return document.elementFromPoint(arguments[0], arguments[1]) === document.querySelector(arguments[2])",
                                p[0], p[1], sel)
    if not hit:
        fail(f"the pointer at {p} is not on {sel}")
    return page.text("#tip"), p


def key(page, k):
    ActionChains(page.d).send_keys(k).perform()


def check(page):
    d = page.d
    # ---- full width
    wide = d.execute_script("return [document.getElementById('timeline').getBoundingClientRect().width, window.innerWidth]")
    if wide[0] < wide[1] - 60:
        fail(f"the timeline is {wide[0]} px wide in a {wide[1]} px window")

    # ---- opens on the peak: the step holding it, one either side, bands
    peak = num(page.attr("#peak-marker", "data-peak"))
    if peak != expect["peak_allocated_bytes"]:
        fail(f"timeline peak {peak} != report {expect['peak_allocated_bytes']}")
    a, b = window(page)
    ps = steps_in(a, b)
    if not (a <= expect["peak_seq"] <= b):
        fail(f"the first window {a}..{b} does not hold the peak (seq {expect['peak_seq']})")
    if len(ps) > 3 or expect["peak_step"] not in ps:
        fail(f"the first window spans steps {ps}, the peak is in step {expect['peak_step']}")
    if page.attr("#timeline", "data-mode") != "bands":
        fail(f"the first window is drawn as {page.attr('#timeline', 'data-mode')}, not bands")
    if page.attr("#peak-marker", "visibility") == "hidden":
        fail("the red dot is not in the first window")
    labels = page.eval_all("#timeline text.step-label", "ts => ts.map(t => t.textContent)")
    if f"step {expect['peak_step']}" not in labels:
        fail(f"the first window's step labels {labels} lack step {expect['peak_step']}")
    # the stack of bands reaches the red dot: the highest band under it tops out at its y
    top = d.execute_script("""
        const m = document.getElementById("peak-marker"), px = Number(m.getAttribute("cx"));
        let best = 1e9, name = null;
        for (const p of document.querySelectorAll("#bands polygon.band")) {
          const v = p.getAttribute("points").trim().split(/\\s+/).map(s => s.split(",").map(Number));
          for (let i = 0; i + 1 < v.length; i++)
            if (v[i][1] === v[i + 1][1] && Math.min(v[i][0], v[i + 1][0]) - 0.06 <= px && px <= Math.max(v[i][0], v[i + 1][0]) + 0.06 && v[i][1] < best) {
              best = v[i][1]; name = p.getAttribute("data-name"); }
        }
        return [best, Number(m.getAttribute("cy")), name];""")
    if abs(top[0] - top[1]) > 1.5:
        fail(f"the bands under the red dot top out at y {top[0]} ({top[2]}), the dot is at {top[1]}")
    nbands = page.count("#bands polygon.band")
    rmax = num(page.attr("#reserved-line", "data-max"))
    if rmax != expect["peak_reserved_bytes"]:
        fail(f"reserved line's max {rmax} != report's peak reserved {expect['peak_reserved_bytes']}")

    # ---- hovering the top tensor's band at the peak: its name, category and stack
    sel = d.execute_script("""
        const m = document.getElementById("peak-marker"), px = Number(m.getAttribute("cx"));
        for (const p of document.querySelectorAll("#bands polygon.band")) {
          const t = Number(p.getAttribute("data-t"));
          if (D.tensors.rows[t][3] === arguments[0]) return "#bands polygon.band[data-t='" + t + "']";
        }
        return null;""", expect["top_birth"])
    if not sel:
        fail(f"no band for {expect['top_tensor']} (born at seq {expect['top_birth']})")
    tip, _ = tip_at(page, sel)
    if not tip.startswith(expect["top_tensor"]):
        fail(f"hovering {expect['top_tensor']}'s band shows '{tip.splitlines()[0] if tip else ''}'")
    if "category: " not in tip or "born:" not in tip or "freed:" not in tip:
        fail(f"the band's tooltip lacks category / born / freed: {tip}")
    at = -1
    for fr in expect["top_stack"]:
        k = tip.find("  " + fr, at + 1)
        if k < 0:
            fail(f"the band's stack lacks '{fr}' (after what came before it): {tip}")
        at = k
    if "__libc_start_call_main" in tip or "(start-up:" not in tip:
        fail(f"the band's stack does not fold the start-up frames: {tip}")
    # click pins it; Esc unpins
    ActionChains(d).click().perform()
    pinned = page.text("#pinned")
    if expect["top_tensor"] not in pinned or d.execute_script("return getComputedStyle(document.getElementById('pinned')).display") == "none":
        fail(f"clicking the band did not pin it: '{pinned}'")
    key(page, Keys.ESCAPE)
    if d.execute_script("return getComputedStyle(document.getElementById('pinned')).display") != "none":
        fail("Esc did not unpin")

    # ---- keys: arrows step a step, +/- zoom
    key(page, Keys.ARROW_RIGHT)
    a2, b2 = window(page)
    if steps_in(a2, b2) != [s + 1 for s in ps]:
        fail(f"-> moved the window to steps {steps_in(a2, b2)}, from {ps}")
    key(page, Keys.ARROW_LEFT)
    if window(page) != (a, b):
        fail(f"<- did not come back to {a}..{b}: {window(page)}")
    key(page, "+")
    a3, b3 = window(page)
    if not (b3 - a3) < 0.6 * (b - a):
        fail(f"+ did not zoom in: {a3}..{b3} from {a}..{b}")
    key(page, "-")
    a4, b4 = window(page)
    if abs((b4 - a4) - (b - a)) > 2:
        fail(f"- did not zoom out again: {a4}..{b4}, first {a}..{b}")

    # ---- colour: category first (the trainer's names and phases say them), phase, class
    if page.attr("#legend", "data-by") != "category" or page.attr("#bands", "data-by") != "category":
        fail(f"the page does not colour by category first ({page.attr('#legend', 'data-by')})")
    fills_cat = set(page.eval_all("#bands polygon.band", "ps => ps.map(p => p.getAttribute('fill'))"))
    page.click("#by-phase")
    fills_ph = set(page.eval_all("#bands polygon.band", "ps => ps.map(p => p.getAttribute('fill'))"))
    if page.attr("#bands", "data-by") != "phase" or fills_ph == fills_cat:
        fail("colour by phase changed nothing")
    page.click("#by-class")
    if expect["top_class"] not in page.text("#legend"):
        fail(f"the legend by class does not name {expect['top_class']}")
    page.click("#by-category")

    # ---- all steps: one click, a min/max envelope (one column per step), not a comb
    page.click("#v-all")
    if page.attr("#timeline", "data-mode") != "envelope":
        fail(f"all steps are drawn as {page.attr('#timeline', 'data-mode')}, not an envelope")
    cols = num(page.attr("polygon.envelope", "data-columns"))
    if not (0 < cols <= len(steps) + 1):
        fail(f"the envelope has {cols} columns for {len(steps)} steps")
    a5, b5 = window(page)
    if len(steps_in(a5, b5)) != len(steps):
        fail(f"all steps shows {len(steps_in(a5, b5))} of {len(steps)}")
    # a click on a point that is not the peak, three quarters of the way in: what was live there
    box = page.box("#timeline")
    page.mouse_click(box["x"] + 64 + (box["width"] - 64) * 0.75, box["y"] + 150)
    seq = num(page.attr("#live-table", "data-seq"))
    rows = page.eval_all("#live-table tr.live-row", """rs => rs.map(r => ({name: r.cells[0].textContent,
        birth: Number(r.getAttribute('data-birth')), death: Number(r.getAttribute('data-death'))}))""")
    if not rows:
        fail(f"clicking at seq {seq} lists nothing")
    r0 = rows[0]
    if not (r0["birth"] <= seq and (r0["death"] == 0 or r0["death"] > seq)):
        fail(f"{r0['name']} ({r0['birth']}..{r0['death']}) shown at seq {seq}")
    with open(clicked_file, "w", encoding="utf-8") as f:
        json.dump({"seq": seq, "name": r0["name"], "birth": r0["birth"], "death": r0["death"]}, f)
    page.click("#peak-marker")
    if num(page.attr("#live-table", "data-seq")) != expect["peak_seq"] or not page.count("#live-table tr.live-row"):
        fail("clicking the peak does not list what was live at the peak")
    page.click("#v-peak")
    if window(page) != (a, b):
        fail(f"'peak step' does not come back to {a}..{b}: {window(page)}")

    # ---- flame graphs start at the program; the switch shows start-up frames
    def flame_names():
        return page.eval_all("svg.flame rect", "rs => rs.map(r => r.getAttribute('data-name'))") + \
            page.eval_all("svg.flame text", "ts => ts.map(t => t.textContent)")
    names = flame_names()
    if any("__libc_start_call_main" in n for n in names):
        fail("a flame frame reads __libc_start_call_main by default")
    if "(start-up)" not in names:
        fail("no (start-up) bar in the flame graphs")
    root = num(page.attr("#flame-peak rect.flame-root", "data-bytes"))
    if root != expect["peak_allocated_bytes"]:
        fail(f"the peak icicle's root {root} != peak allocated {expect['peak_allocated_bytes']}")
    page.click("#show-startup")
    if not any(n.startswith("__libc_start_call_main") for n in flame_names()):
        fail("the switch does not show __libc_start_call_main")
    page.click("#show-startup")

    # ---- the segment map: to scale, rows >= 24 px, its moment the red dot's or said
    nseg = page.count("rect.segment", within="svg.segmap[data-reason=peak]")
    if nseg != expect["segments"]:
        fail(f"segment map has {nseg} segments, the peak snapshot {expect['segments']}")
    hmin = min(page.eval_all("svg.segmap[data-reason=peak] rect.segment", "rs => rs.map(r => r.getBoundingClientRect().height)"))
    if hmin < 24:
        fail(f"a segment row is {hmin} px tall")
    mseq = num(page.attr("p.segmap-moment", "data-seq"))
    red = num(page.attr("#peak-marker", "data-seq"))
    why = page.text("p.segmap-moment")
    if mseq != red and not (f"seq {mseq}" in why and f"red dot (seq {red})" in why and "reserved" in why):
        fail(f"the segment map is at seq {mseq}, the red dot at {red}, and says: {why}")
    states = set(page.eval_all("svg.segmap[data-reason=peak] rect.block", "rs => rs.map(r => r.getAttribute('data-state'))"))
    if "1" not in states:
        fail("the segment map has no allocated block")
    bsel = "svg.segmap[data-reason=peak] rect.block[data-state='1']:not([data-t='-1'])"
    btip, _ = tip_at(page, bsel)
    want = d.execute_script("return D.tensors.rows[Number(document.querySelector(arguments[0]).getAttribute('data-t'))][0]", bsel)
    if not btip.startswith(want) or "stack (innermost first)" not in btip:
        fail(f"hovering a block shows '{btip[:200]}', not {want}'s band text")

    # ---- the analyses: what ran, or one line on how to add them
    ran = page.count("div.analysis")
    skipped = page.count("#analyses-skipped")
    if not ran and not skipped:
        fail("the analyses section says nothing")
    if skipped and "--with" not in page.text("#analyses-skipped"):
        fail(f"the skipped analyses' line does not say how to add them: {page.text('#analyses-skipped')}")

    # ---- the screenshot, as the page opens
    d.refresh()
    page.finish(os.path.join(outdir, "page.png"))

    # ---- print: A4, the summary, the peak step, the top tables; no flame graphs
    d.execute_script("document.getElementById('right').click()")  # a view that printing must leave
    d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    shown = d.execute_script("""return ["summary", "timeline", "top-live", "flames", "segment-maps"].map(i => {
        const e = document.getElementById(i); return e && getComputedStyle(e).display !== "none" && e.getBoundingClientRect().height > 0; })""")
    if shown[:3] != [True, True, True] or shown[3]:
        fail(f"printed: summary, timeline, top tables, flames, segment maps = {shown}")
    pa, pb = window(page)
    if (pa, pb) != (a, b):
        fail(f"printing shows seq {pa}..{pb}, not the peak's steps {a}..{b}")
    pw = page.box("#timeline")["width"]
    if pw > 720:
        fail(f"the printed timeline is {pw} px wide: wider than A4")
    pdf = d.execute_cdp_cmd("Page.printToPDF", {"preferCSSPageSize": True, "printBackground": True})
    data = base64.b64decode(pdf["data"])
    with open(os.path.join(outdir, "page.pdf"), "wb") as f:
        f.write(data)
    pages = data.count(b"/Type /Page") - data.count(b"/Type /Pages")
    a4 = b"/MediaBox [0 0 595" in data or b"/MediaBox [0 0 594" in data
    if not a4 or not 1 <= pages <= 6:
        fail(f"the print is {pages} pages, A4: {a4}")
    d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})

    print(f"ok: opens on steps {ps} (seq {a}..{b}, peak step {expect['peak_step']}) as {nbands} bands reaching the red dot; "
          f"{expect['top_tensor']}'s band shows its stack ({len(expect['top_stack'])} frames to main); pin, Esc, arrows, +/-; "
          f"category/phase/class; all steps: envelope of {cols} columns; a click at seq {seq}: {r0['name']}; flames from main "
          f"(start-up folded, switch shows it); segment map {nseg} rows >= {hmin:.0f} px at seq {mseq} (red dot {red}); "
          f"block hover; print A4, {pages} page(s); {outdir}/page.png, page.pdf")


run(page_file, check)
