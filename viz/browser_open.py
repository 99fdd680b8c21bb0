"""What the browser checks share: a gpumem viz page opened from disk in Debian's headless chromium
(driven by Debian's chromedriver through selenium), the network blocked, console errors and any
request collected, and the end of a check (screenshot, then fail on an error or a request).

The network, through the Chrome DevTools Protocol (selenium's execute_cdp_cmd), before the page
is opened: Network.emulateNetworkConditions offline (navigator.onLine is false, http(s) fails),
and Network.setBlockedURLs ["*"] (every request the page makes is aborted, file:// ones too).
Requests are noticed in chromedriver's performance log: every Network.requestWillBeSent and
Network.webSocketCreated after the page's own load counts, blocked or not. Console errors:
chromedriver's browser log at level SEVERE (console.error and uncaught exceptions).

Usage, from a check: browser_open.run(PAGE.html, check) calls check(page) with a Page; check
ends with page.finish(SHOT.png). Exit 1 with one "FAIL: ..." line on stderr on any failure; exit 77
when selenium cannot be imported."""
import base64
import json
import math
import os
import pathlib
import shutil
import sys
import tempfile

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
VIEWPORT = (1280, 720)  # playwright's default, which the first version of these checks used

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
except ImportError as e:
    print(f"skipped: {sys.executable} cannot import selenium ({e}; make deps installs python3-selenium)",
          file=sys.stderr)
    sys.exit(77)


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def num(v):
    """JavaScript's Number() of an attribute's value: null and "" are 0, junk is NaN."""
    if v is None:
        return 0
    s = str(v).strip()
    if not s:
        return 0
    try:
        return int(s)
    except ValueError:
        pass
    try:
        x = float(s)
    except ValueError:
        return math.nan
    return int(x) if x.is_integer() else x


class Page:
    def __init__(self, driver, url):
        self.d = driver
        self.url = url

    def _el(self, sel):
        return self.d.find_element(By.CSS_SELECTOR, sel)

    def attr(self, sel, name):
        """The attribute as written (None when absent), of the first element sel matches."""
        return self._el(sel).get_dom_attribute(name)

    def text(self, sel):
        return self.d.execute_script("return arguments[0].textContent", self._el(sel))

    def eval_all(self, sel, fn):
        """fn (a JavaScript function's source) called on the array of elements sel matches."""
        return self.d.execute_script(
            f"return ({fn})(Array.from(document.querySelectorAll(arguments[0])))", sel)

    def count(self, sel, within=None):
        """How many elements sel matches (inside the first element `within` matches, if given)."""
        return self.d.execute_script(
            "const r = arguments[1] === null ? document : document.querySelector(arguments[1]);"
            "return r ? r.querySelectorAll(arguments[0]).length : 0", sel, within)

    def box(self, sel):
        """The element's box in the viewport's coordinates: {x, y, width, height}."""
        return self.d.execute_script(
            "const r = arguments[0].getBoundingClientRect();"
            "return {x: r.x, y: r.y, width: r.width, height: r.height}", self._el(sel))

    def click(self, sel):
        self._el(sel).click()

    def _pointer(self, x, y, click):
        a = ActionChains(self.d)
        a.w3c_actions.pointer_action.move_to_location(int(x), int(y))
        if click:
            a.w3c_actions.pointer_action.click()
        a.perform()

    def mouse_move(self, x, y):
        self._pointer(x, y, False)

    def mouse_click(self, x, y):
        self._pointer(x, y, True)

    def finish(self, shot):
        """A full-page screenshot with the pointer out of the way; fails on console errors or
        requests."""
        self.mouse_move(0, 0)  # no tooltip in the screenshot
        m = self.d.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        png = self.d.execute_cdp_cmd("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": m["width"], "height": m["height"], "scale": 1}})
        with open(shot, "wb") as f:
            f.write(base64.b64decode(png["data"]))
        errors = [e["message"] for e in self.d.get_log("browser") if e["level"] == "SEVERE"]
        if errors:
            fail("console errors: " + "; ".join(errors))
        requests = []
        for e in self.d.get_log("performance"):
            m = json.loads(e["message"])["message"]
            if m["method"] == "Network.requestWillBeSent":
                u = m["params"]["request"]["url"]
                if u != self.url:
                    requests.append(u)
            elif m["method"] == "Network.webSocketCreated":
                requests.append(m["params"]["url"])
        if requests:
            fail("requests: " + " ".join(requests))


def run(page_file, check):
    for f in (CHROMIUM, CHROMEDRIVER):
        if not os.access(f, os.X_OK):
            print(f"skipped: {f} is missing (make deps installs chromium and chromium-driver)", file=sys.stderr)
            sys.exit(77)
    profile = tempfile.mkdtemp(prefix="gpumem-viz-chromium-")
    driver = None
    try:
        o = webdriver.ChromeOptions()
        o.binary_location = CHROMIUM
        for a in ("--headless", "--no-sandbox", "--disable-dev-shm-usage", "--user-data-dir=" + profile,
                  "--window-size=%d,%d" % VIEWPORT):
            o.add_argument(a)
        o.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)
        driver.set_page_load_timeout(60)
        driver.implicitly_wait(5)  # an element looked up waits for it a while, as playwright's did
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": VIEWPORT[0], "height": VIEWPORT[1], "deviceScaleFactor": 1, "mobile": False})
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
            "offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
        driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*"]})
        # what the start page (chromium's new tab page) logged and loaded is not the page's
        driver.get("about:blank")
        driver.get_log("browser")
        driver.get_log("performance")
        url = pathlib.Path(os.path.abspath(page_file)).as_uri()
        driver.get(url)
        check(Page(driver, url))
    except Exception as e:  # noqa: BLE001 -- any error is the check failing, said in one line
        fail(f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
