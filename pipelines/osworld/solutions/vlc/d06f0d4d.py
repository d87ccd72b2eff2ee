"""vlc/d06f0d4d: a black-ish volume slider: Tools > Preferences, Show settings "All", Interface > Main
interfaces > Qt, "Define the colors of the volume slider" (four R;G;B colours along the slider) all dark
greys, Save (qt-slider-colours in vlcrc)."""
from agent import Agent

DARK = "10;10;10;30;30;30;50;50;50;70;70;70"


def solve(env, obs):
    a = Agent(env)
    dialog = a.vlc_preferences("Qt")
    a.set_text("text", "Define the colors of the volume slider", DARK, app="vlc")
    a.vlc_save_preferences(dialog)
