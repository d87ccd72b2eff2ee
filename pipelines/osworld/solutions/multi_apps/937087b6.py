"""multi_apps/937087b6: VLC the default application of every video type it plays, with xdg-mime in a
terminal (the types read from VLC's desktop file). Totem is the image's default before, as on OSWorld's
Ubuntu."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.open_terminal()
    a.run_ok("xdg-mime default vlc.desktop $(sed -n 's/^MimeType=//p' /usr/share/applications/vlc.desktop | tr ';' '\\n' | grep '^video/')")
    a.run_ok("test \"$(xdg-mime query default video/mp4)\" = vlc.desktop")
