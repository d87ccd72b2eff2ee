"""vlc/f3977615: each file opened starts its own VLC: Tools > Preferences, Interface, Playlist and
Instances, "Use only one instance when started from file manager" off, Save
(one-instance-when-started-from-file=0 in vlcrc)."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    dialog = a.vlc_preferences()
    a.set_checked("check-box", "Use only one instance when started from file manager", False, app="vlc")
    a.vlc_save_preferences(dialog)
