"""The scripted agent's means: what an agent sees and what it does, nothing else.

A reference solution (`<domain>/<task id's first 8 characters>.py`, `solve(env, obs)`) acts only through
`env.step` with pyautogui code, as a model's actions reach OSWorld's server: keys, typing, clicks. Where to
click is read off the accessibility tree the agent observes (OSWorld's XML, drums-guest's /accessibility),
never a coordinate written in the solution; what happened is read off the same tree or the terminal's text
(/terminal). Every wait has a deadline and raises AgentError saying what did not appear, so a solution that
cannot go on stops with the reason instead of acting blind.
"""
import io
import re
import time
from xml.etree import ElementTree as ET

# drums-guest's namespaces for the tree's attributes (tools/drums-guest/src/a11y.py).
NS = "https://accessibility.ubuntu.example.org/ns/"
CP, ST = NS + "component", NS + "state"
DEFAULT_WAIT = 30.0


class AgentError(RuntimeError):
    """The solution could not go on: what it waited for did not come, or what it looked for is not there."""


def _match(want, got):
    if want is None:
        return True
    if isinstance(want, re.Pattern):
        return bool(want.search(got or ""))
    return (got or "") == want


class Node:
    """One node of the tree: role (the XML tag), name, text, states, and its box on the screen."""

    def __init__(self, el, path):
        self.el, self.path = el, path  # path: the nodes from the root down to this one
        self.role, self.name, self.text = el.tag, el.get("name", ""), (el.text or "")

    def state(self, s):
        return self.el.get("{%s}%s" % (ST, s)) == "true"

    @property
    def box(self):
        xy, size = self.el.get("{%s}screencoord" % CP), self.el.get("{%s}size" % CP)
        if not xy or not size:
            return None
        (x, y), (w, h) = (tuple(int(v) for v in re.findall(r"-?\d+", s)) for s in (xy, size))
        return x, y, w, h

    @property
    def centre(self):
        b = self.box
        if b is None or b[2] <= 0 or b[3] <= 0:
            raise AgentError(f"{self} has no box on the screen (not showing)")
        return b[0] + b[2] // 2, b[1] + b[3] // 2

    def visible_region(self):
        """The part of the screen where this node can be seen: its ancestors' boxes intersected (a
        scrolled pane's content is larger than the pane, so a node can have a box outside it)."""
        x0, y0, x1, y1 = -10**6, -10**6, 10**6, 10**6
        for el in self.path[1:-1]:
            b = Node(el, []).box
            if b is None or b[2] <= 0 or b[3] <= 0:
                continue
            x0, y0, x1, y1 = max(x0, b[0]), max(y0, b[1]), min(x1, b[0] + b[2]), min(y1, b[1] + b[3])
        return x0, y0, x1, y1

    def under(self, role=None, name=None):
        """True when one of this node's ancestors matches."""
        return any(_match(role, a.tag) and _match(name, a.get("name", "")) for a in self.path[:-1])

    def __repr__(self):
        return f"<{self.role} {self.name!r}{' ' + str(self.box) if self.box else ''}>"


class Agent:
    def __init__(self, env, pause=0.4):
        self.env, self.pause = env, pause
        self.last_screenshot = None

    # -- acting: pyautogui through env.step ------------------------------------------------------------

    def act(self, code, pause=None):
        obs, _, _, _ = self.env.step(code, pause=self.pause if pause is None else pause)
        self.last_screenshot = obs.get("screenshot")
        return obs

    def hotkey(self, *keys):
        self.act(f"pyautogui.hotkey({', '.join(repr(k) for k in keys)})")

    def press(self, key, presses=1):
        self.act(f"pyautogui.press({key!r}, presses={int(presses)}, interval=0.05)")

    def write(self, text):
        self.act(f"pyautogui.write({text!r}, interval=0.01)")

    def click(self, xy, button="left", clicks=1):
        x, y = xy
        self.act(f"pyautogui.click({int(x)}, {int(y)}, button={button!r}, clicks={int(clicks)})")

    def click_node(self, node, **kw):
        self.click(node.centre, **kw)
        return node

    def fail(self):
        """OSWorld's answer for a task that cannot be done: the last action is FAIL."""
        self.env.step("FAIL", pause=0)

    # -- seeing: the accessibility tree ---------------------------------------------------------------

    def tree(self, tries=3):
        """The accessibility tree; asked again (2 s apart, `tries` times in all) when the guest gives none,
        as it may while an application is starting."""
        for i in range(tries):
            xml = self.env.controller.get_accessibility_tree()
            if xml:
                return ET.fromstring(xml)
            if i + 1 < tries:
                time.sleep(2)
        raise AgentError(f"no accessibility tree from the guest ({tries} tries, 2 s apart)")

    def find_all(self, role=None, name=None, app=None, showing=True, text=None, root=None):
        """Nodes matching role and name (a string matches exactly, a compiled pattern by search), under the
        application named `app` when given; showing: only nodes with a box on the screen."""
        top = root if root is not None else self.tree()
        out = []

        def walk(el, path):
            path = path + [el]
            n = Node(el, path)
            if _match(role, el.tag) and _match(name, n.name) and _match(text, n.text):
                if not showing or (n.box is not None and n.box[2] > 0 and n.box[3] > 0):
                    out.append(n)
            for c in el:
                walk(c, path)

        apps = [a for a in top if _match(app, a.get("name", ""))] if app is not None else [top]
        for a in apps:
            walk(a, [top] if a is not top else [])
        return out

    def find(self, role=None, name=None, **kw):
        found = self.find_all(role, name, **kw)
        return found[0] if found else None

    def wait(self, role=None, name=None, timeout=DEFAULT_WAIT, pick=None, **kw):
        """The first node matching (and accepted by `pick`, when given), polling the tree until `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            found = [n for n in self.find_all(role, name, **kw) if pick is None or pick(n)]
            if found:
                return found[0]
            if time.monotonic() > deadline:
                raise AgentError(f"no {role or 'node'} named {name!r} (app {kw.get('app')!r}) within {timeout:.0f} s")
            time.sleep(0.5)

    def wait_gone(self, role=None, name=None, timeout=DEFAULT_WAIT, **kw):
        deadline = time.monotonic() + timeout
        while self.find_all(role, name, **kw):
            if time.monotonic() > deadline:
                raise AgentError(f"{role or 'node'} named {name!r} still there after {timeout:.0f} s")
            time.sleep(0.5)

    def click_wait(self, role=None, name=None, timeout=DEFAULT_WAIT, **kw):
        return self.click_node(self.wait(role, name, timeout=timeout, **kw))

    def reveal(self, role=None, name=None, timeout=DEFAULT_WAIT, **kw):
        """The node, scrolled into its pane's view with the mouse wheel (over the pane) when its centre
        is outside the part of the pane on the screen."""
        for _ in range(30):
            n = self.wait(role, name, timeout=timeout, **kw)
            x0, y0, x1, y1 = n.visible_region()
            x, y = n.centre
            if y0 <= y < y1 and x0 <= x < x1:
                return n
            clicks = -3 if y >= y1 else 3
            self.act(f"pyautogui.scroll({clicks}, x={(x0 + x1) // 2}, y={(y0 + y1) // 2})")
        raise AgentError(f"{n} stays outside its pane's view {(x0, y0, x1, y1)} after scrolling")

    # -- the screen -----------------------------------------------------------------------------------

    def screen(self):
        """The screen now, as a PIL image (the screenshot an agent observes)."""
        from PIL import Image
        return Image.open(io.BytesIO(self.env.controller.get_screenshot())).convert("RGB")

    def wait_screen(self, test, what, settle=2.0, timeout=90.0):
        """Wait until `test(image)` holds for a screen that then stays the same for `settle` seconds
        (a window that has finished drawing); `what` names it in the error."""
        from PIL import ImageChops
        deadline = time.monotonic() + timeout
        last, since = None, None
        while True:
            im = self.screen().reduce(4)
            if test(im):
                if last is not None and ImageChops.difference(im, last).getbbox() is None:
                    if time.monotonic() - since >= settle:
                        return im
                else:
                    last, since = im, time.monotonic()
            else:
                last = None
            if time.monotonic() > deadline:
                raise AgentError(f"{what} not on the screen within {timeout:.0f} s")
            time.sleep(0.5)

    @staticmethod
    def changed(before, after):
        """The share of the screen that differs between two screens (as wait_screen returns them)."""
        from PIL import ImageChops
        diff = ImageChops.difference(before, after).convert("L").getdata()
        return sum(1 for v in diff if v > 24) / len(diff)

    # -- the terminal ---------------------------------------------------------------------------------

    def open_terminal(self, timeout=DEFAULT_WAIT):
        """Ctrl+Alt+T, as on Ubuntu; returns once a new terminal is there, focused, with a prompt."""
        before = len(self.find_all("terminal", app="gnome-terminal-server", showing=False))
        self.hotkey("ctrl", "alt", "t")
        deadline = time.monotonic() + timeout
        while True:
            terms = self.find_all("terminal", app="gnome-terminal-server", showing=False)
            if len(terms) > before and any(t.state("focused") and "$" in t.text for t in terms):
                return
            if time.monotonic() > deadline:
                raise AgentError(f"no new focused terminal with a prompt within {timeout:.0f} s of Ctrl+Alt+T")
            time.sleep(0.5)

    def terminal_text(self):
        return self.env.controller.get_terminal_output() or ""

    def run(self, command, timeout=60.0):
        """Type a command line into the focused terminal and wait until it has finished: the line ends by
        echoing a marker (built so that the typed line itself does not show it), read off /terminal."""
        self._runs = getattr(self, "_runs", 0) + 1
        mark = f"END{self._runs}OF{int(time.time()) % 100000}"
        self.write(f"{command}; echo {mark[:3]}''{mark[3:]} status=$?\n")
        deadline = time.monotonic() + timeout
        while True:
            out = self.terminal_text()
            m = re.search(re.escape(mark) + r" status=(\d+)", out)
            if m:
                return int(m.group(1))
            if time.monotonic() > deadline:
                raise AgentError(f"`{command}` did not finish within {timeout:.0f} s; terminal ends: {out[-300:]!r}")
            time.sleep(0.5)

    def run_ok(self, command, timeout=60.0):
        status = self.run(command, timeout)
        if status != 0:
            raise AgentError(f"`{command}` exited {status}; terminal ends: {self.terminal_text()[-300:]!r}")

    # -- Chromium (the tasks' google-chrome) ----------------------------------------------------------

    def browse(self, url, title, timeout=DEFAULT_WAIT):
        """Type `url` into the focused browser window's address bar; returns the page's document once its
        title matches `title` (a string or a pattern)."""
        self.wait("entry", "Address and search bar", timeout=timeout)  # a browser window is there
        self.hotkey("ctrl", "l")
        self.write(url + "\n")
        return self.wait("document-web", title, timeout=timeout)

    def choose(self, combo, item, timeout=DEFAULT_WAIT):
        """Pick `item` of the drop-down list named `combo` (a settings page's select): open the list, click
        the item, and return it once the list shows it selected (closed again, so not showing)."""
        self.click_wait("combo-box", combo, timeout=timeout)
        self.click_wait("menu-item", item, timeout=timeout)
        return self.wait("menu-item", item, timeout=timeout, showing=False, pick=lambda n: n.state("selected"))

    def toggle_on(self, role, name, timeout=DEFAULT_WAIT, **kw):
        """Click a check box or toggle unless it is already on; wait until it shows on."""
        node = self.wait(role, name, timeout=timeout, **kw)
        if not (node.state("checked") or node.state("pressed")):
            self.click_node(node)
        return node

    # -- VLC ------------------------------------------------------------------------------------------

    def vlc_preferences(self, advanced_section=None, top_level=False):
        """VLC's Tools > Preferences; with `advanced_section` (a tree item's name, e.g. "Qt"), its "All"
        view filtered to that section and the section opened (top_level: the category of that name, not
        a module's page under another one). Returns the dialog's name."""
        self.click_wait("menu-item", "Tools", app="vlc")
        self.click_wait("menu-item", "Preferences", app="vlc")
        self.wait("dialog", "Simple Preferences", app="vlc")
        if advanced_section is None:
            return "Simple Preferences"
        self.click_wait("radio-button", "All", app="vlc")
        search = self.wait("text", "", app="vlc", pick=lambda n: n.under("dialog", "Advanced Preferences"))
        self.click_node(search)
        self.write(advanced_section)
        self.wait("table-cell", advanced_section, app="vlc")
        cells = self.find_all("table-cell", advanced_section, app="vlc")
        self.click_node(min(cells, key=lambda n: n.box[0]) if top_level else cells[0])
        return "Advanced Preferences"

    def vlc_save_preferences(self, dialog):
        self.click_wait("push-button", "Save", app="vlc", pick=lambda n: n.under("dialog", dialog))
        self.wait_gone("dialog", dialog, app="vlc", timeout=10)

    def set_checked(self, role, name, on, **kw):
        """Click a check box until its state is `on`."""
        for _ in range(3):
            node = self.reveal(role, name, **kw)
            if node.state("checked") == on:
                return node
            self.click_node(node)
            time.sleep(0.3)
        raise AgentError(f"{node} does not turn {'on' if on else 'off'}")

    def set_text(self, role, name, value, **kw):
        """Replace a field's text (a spin button's too): click it, select all, type, Tab away."""
        self.click_node(self.reveal(role, name, **kw))
        self.hotkey("ctrl", "a")
        self.write(str(value))
        self.press("tab")
        return self.wait(role, name, pick=lambda n: n.text.strip() == str(value), **kw)

    # -- GIMP -----------------------------------------------------------------------------------------
    # GIMP 2.10 is GTK 2, and the image has no GTK 2 accessibility module (gail), so GIMP is not in the
    # accessibility tree: the agent sees it on the screenshot and drives it from the keyboard.

    @staticmethod
    def _gimp_grey(im):
        """The share of the screen in the greys of GIMP 2.10's default (Dark) theme."""
        px = im.getdata()
        return sum(1 for r, g, b in px if abs(r - g) < 8 and abs(g - b) < 8 and 40 <= r <= 90) / len(px)

    def gimp_wait(self, timeout=120.0):
        """GIMP's window drawn on the screen (a fifth of it in its theme's greys, and still)."""
        return self.wait_screen(lambda im: self._gimp_grey(im) > 0.15, "GIMP's window", timeout=timeout)

    def gimp_run(self, action):
        """Help > Search and Run a Command ("/"): type the action's name, Enter runs the first match."""
        self.press("/")
        time.sleep(1.5)
        self.write(action)
        time.sleep(1.5)
        self.press("enter")
        time.sleep(2)
