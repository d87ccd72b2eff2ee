"""multi_apps/937087b6: VLC the default application of the video types, with xdg-mime in a terminal."""
from agent import Agent

TYPES = "mp4 x-matroska webm x-msvideo avi mpeg quicktime x-flv ogg 3gpp x-ms-wmv x-m4v mp2t x-ogm+ogg x-theora+ogg"


def solve(env, obs):
    a = Agent(env)
    a.open_terminal()
    a.run_ok(f"for t in {TYPES}; do xdg-mime default vlc.desktop video/$t; done")
