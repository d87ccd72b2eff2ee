"""libreoffice_impress/2cd43775: AutoRecovery every 3 minutes: Tools > Options (Alt+F12), Load/Save >
General, "Save AutoRecovery information every" on and 3 minutes, OK.

The dialog is driven from the keyboard, its layout known (LibreOffice 7.4's Options tree and page): walking
LibreOffice's accessibility tree while the Options dialog is open made LibreOffice 7.4 close its window
(seen three times on this image), so the tree is read only before the dialog opens."""
import re
import time

from agent import Agent


def solve(env, obs):
    a = Agent(env)
    # The image's LibreOffice profile is past its first start (no template chooser, no tip of the day), as
    # on OSWorld's image: Impress opens on a new presentation.
    a.wait("frame", re.compile("LibreOffice Impress$"), app="soffice", timeout=90, pick=lambda n: n.state("active"))
    # The dialog's coming and going are read off the screen (the tree is not read while it is open): the
    # dialog, mostly white over the white slide, changes some 7% of the screen.
    before = a.screen().reduce(4)
    a.hotkey("alt", "f12")
    dialog = a.wait_screen(lambda im: Agent.changed(before, im) > 0.03, "LibreOffice's Options dialog", timeout=60)
    # The tree's focus is on LibreOffice > User Data: fold LibreOffice, go to Load/Save, unfold, General.
    for key in ("home", "left", "down", "right", "down"):
        a.press(key)
    # The page's focus order: two Load check boxes, then AutoRecovery's check box and its minutes.
    a.press("tab", 3)
    a.press("space")
    a.press("tab")
    a.hotkey("ctrl", "a")
    a.write("3")
    a.press("tab")
    a.press("enter")  # OK, the dialog's default button
    a.wait_screen(lambda im: Agent.changed(dialog, im) > 0.03, "Impress without the Options dialog", timeout=60)
    time.sleep(3)  # LibreOffice writes its settings to registrymodifications.xcu shortly after
