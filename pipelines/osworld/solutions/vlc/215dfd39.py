"""vlc/215dfd39: no cone on the splash screen: Tools > Preferences, Show settings "All", Interface > Main
interfaces > Qt, "Display background cone or art" off, Save (qt-bgcone=0 in vlcrc)."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    dialog = a.vlc_preferences("Qt")
    a.set_checked("check-box", "Display background cone or art", False, app="vlc")
    a.vlc_save_preferences(dialog)
