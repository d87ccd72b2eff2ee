"""vlc/5ac2891a: VLC stays open when the video ends: Tools > Preferences, Show settings "All", Playlist,
"Play and exit" off, Save (play-and-exit=0 in vlcrc; the task's setup turned it on). Untested:
desktop-env 1.0.2 has no metric `check_play_and_exit`, so DesktopEnv refuses the task file before any
action (docs/osworld.md)."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    dialog = a.vlc_preferences("Playlist", top_level=True)
    a.set_checked("check-box", "Play and exit", False, app="vlc")
    a.vlc_save_preferences(dialog)
