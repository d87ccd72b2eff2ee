"""os/a4d98375: GNOME's automatic screen lock on, in a terminal."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.open_terminal()
    a.run_ok('gsettings set org.gnome.desktop.screensaver lock-enabled true')
