"""vlc/9195653c: the volume control up to 200%: Tools > Preferences, Show settings "All", Interface >
Main interfaces > Qt, "Maximum Volume displayed" 200, Save (qt-max-volume=200 in vlcrc)."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    dialog = a.vlc_preferences("Qt")
    a.set_text("spin-button", "Maximum Volume displayed", 200, app="vlc")
    a.vlc_save_preferences(dialog)
