# The AT-SPI tree of the session's desktop as OSWorld's XML (run by drums-guest as the desktop user, with
# Debian's python3 and python3-pyatspi). Printed on stdout; problems on stderr with exit status 3.
# With the argument `terminal`: {"output": the focused terminal's text or null}, for GET /terminal.
import sys

try:
    import pyatspi
except ImportError as e:
    print(f"pyatspi is not available ({e}): install python3-pyatspi in the session", file=sys.stderr)
    sys.exit(3)
from xml.etree import ElementTree as ET

NS = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
    "doc": "https://accessibility.ubuntu.example.org/ns/document",
    "docattr": "https://accessibility.ubuntu.example.org/ns/document/attributes",
    "txt": "https://accessibility.ubuntu.example.org/ns/text",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
    "act": "https://accessibility.ubuntu.example.org/ns/action",
}
for prefix, uri in NS.items():
    ET.register_namespace(prefix, uri)
MAX_DEPTH, MAX_WIDTH = 50, 1024


def q(ns, name):
    return "{%s}%s" % (NS[ns], name)


def node_xml(node, depth):
    attrs = {"name": node.name or ""}
    for st in node.getState().getStates():
        label = pyatspi.StateType._enum_lookup.get(st, "")
        label = label.split("_", 1)[1].lower() if "_" in label else ""
        if label:
            attrs[q("st", label)] = "true"
    try:
        for k, v in node.get_attributes().items():
            if k:
                attrs[q("attr", k)] = v
    except Exception:
        pass
    if attrs.get(q("st", "visible")) == "true" and attrs.get(q("st", "showing")) == "true":
        try:
            x, y, w, h = node.queryComponent().getExtents(pyatspi.XY_SCREEN)
            attrs[q("cp", "screencoord")] = str((x, y))
            attrs[q("cp", "size")] = str((w, h))
        except NotImplementedError:
            pass
    text = ""
    try:
        t = node.queryText()
        text = t.getText(0, t.characterCount).replace("\ufffc", "").replace("\ufffd", "")
    except NotImplementedError:
        pass
    for iface, key in (("queryImage", "image"), ("querySelection", "selection")):
        try:
            getattr(node, iface)()
            attrs[key] = "true"
        except NotImplementedError:
            pass
    try:
        v = node.queryValue()
        for key, get in (("value", lambda: v.currentValue), ("min", lambda: v.minimumValue),
                         ("max", lambda: v.maximumValue), ("step", lambda: v.minimumIncrement)):
            try:
                attrs[q("val", key)] = str(get())
            except Exception:
                pass
    except NotImplementedError:
        pass
    try:
        a = node.queryAction()
        for i in range(a.nActions):
            n = a.getName(i).replace(" ", "-")
            attrs[q("act", n + "_desc")] = a.getDescription(i)
            attrs[q("act", n + "_kb")] = a.getKeyBinding(i)
    except NotImplementedError:
        pass
    role = (node.getRoleName().strip() or "unknown").replace(" ", "-")
    el = ET.Element(role, attrs)
    if text:
        el.text = text
    if depth < MAX_DEPTH:
        try:
            for i, child in enumerate(node):
                if i == MAX_WIDTH:
                    break
                el.append(node_xml(child, depth + 1))
        except Exception:
            pass
    return el


# Terminal emulators whose terminal widget (VTE) shows in AT-SPI with the role `terminal`. OSWorld's server
# reads gnome-terminal-server's only; the others are the Debian terminals an image may hold instead.
TERMINAL_APPS = ("gnome-terminal-server", "xfce4-terminal", "mate-terminal", "lxterminal", "tilix", "terminator")


def terminal_text():
    """OSWorld's /terminal: the text of the focused terminal of the active window of a terminal
    application, right-stripped; None unless exactly one such terminal is found."""
    found = []
    for app in pyatspi.Registry.getDesktop(0):
        if (app.name or "") not in TERMINAL_APPS:
            continue
        for frame in app:
            if frame is None or frame.getRoleName() != "frame" or not frame.getState().contains(pyatspi.STATE_ACTIVE):
                continue
            stack = [(frame, 0)]
            while stack:
                node, depth = stack.pop()
                if node.getRoleName() == "terminal" and node.getState().contains(pyatspi.STATE_FOCUSED):
                    t = node.queryText()
                    found.append(t.getText(0, t.characterCount).replace("\ufffc", "").replace("\ufffd", ""))
                    continue
                if depth < MAX_DEPTH:
                    stack.extend((c, depth + 1) for c in node if c is not None)
    return found[0].rstrip() if len(found) == 1 else None


if sys.argv[1:] == ["terminal"]:
    import json
    sys.stdout.write(json.dumps({"output": terminal_text()}))
    sys.exit(0)

root = ET.Element("desktop-frame")
for app in pyatspi.Registry.getDesktop(0):
    try:
        root.append(node_xml(app, 1))
    except Exception as e:
        print(f"skipped an application: {e}", file=sys.stderr)
sys.stdout.write(ET.tostring(root, encoding="unicode"))
