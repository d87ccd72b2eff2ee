"""os/f9be0997: GNOME's Do Not Disturb: notification banners off, in a terminal."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.open_terminal()
    a.run_ok('gsettings set org.gnome.desktop.notifications show-banners false')
