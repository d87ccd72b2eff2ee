"""vlc/a5bbbcd5: VLC starts in its minimal view (no menus, no controls), kept across restarts: Tools >
Preferences, Interface, "Start in minimal view mode", Save (qt-minimal-view=1 in vlcrc)."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    dialog = a.vlc_preferences()
    a.set_checked("check-box", "Start in minimal view mode", True, app="vlc")
    a.vlc_save_preferences(dialog)
