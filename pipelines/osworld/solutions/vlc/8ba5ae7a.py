"""vlc/8ba5ae7a: recordings go to the Desktop: Tools > Preferences, Input / Codecs, "Record directory or
filename" /home/user/Desktop, Save (input-record-path in vlcrc)."""
from agent import Agent

DESKTOP = "/home/user/Desktop"  # the desktop user's (OSWorld's account is `user`, as is Drums')


def solve(env, obs):
    a = Agent(env)
    dialog = a.vlc_preferences()
    a.click_wait("check-box", "Input / Codecs", app="vlc")
    a.set_text("text", "Record directory or filename", DESKTOP, app="vlc")
    a.vlc_save_preferences(dialog)
