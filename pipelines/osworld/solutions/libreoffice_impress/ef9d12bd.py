"""libreoffice_impress/ef9d12bd: the slide pane back on the left: View > Slide Pane, unless the pane (its
accessible "Slides View") already shows. The task's setup closes it with keys through the View menu
(F10, Right twice, Down 11 times, Enter); with the image's LibreOffice profile past its first start (no
template chooser or tip of the day to take those keys) they reach View > Slide Pane on Debian's
LibreOffice 7.4 too. "Slide Pane" is a check item of that menu (role check-menu-item)."""
import re

from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.wait("frame", re.compile("LibreOffice Impress$"), app="soffice", timeout=90)
    if a.find("document-frame", "Slides View", app="soffice", showing=False) is None:
        a.click_wait("menu", "View", app="soffice")
        a.click_wait(re.compile("^(check-)?menu-item$"), "Slide Pane", app="soffice")
        a.wait("document-frame", "Slides View", app="soffice", showing=False)
