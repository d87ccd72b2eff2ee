"""libreoffice_impress/ef9d12bd: the slide pane back on the left: View > Slide Pane, unless the pane (its
accessible "Slides View") already shows. On this image it always does: the task's setup means to close it
with keys through OSWorld's View menu, but Impress's first-start dialogs (template chooser, tip of the day)
take those keys and Debian's LibreOffice 7.4 has another View menu, so the task scores 1 before any action
(docs/osworld.md)."""
import re

from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.wait("frame", re.compile("LibreOffice Impress$"), app="soffice", timeout=90)
    if a.find("document-frame", "Slides View", app="soffice", showing=False) is None:
        a.click_wait("menu", "View", app="soffice")
        a.click_wait("menu-item", "Slide Pane", app="soffice")
        a.wait("document-frame", "Slides View", app="soffice", showing=False)
