"""os/3ce045a0: GNOME's text scaling factor to 1.25 (Large Text), in a terminal."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.open_terminal()
    a.run_ok('gsettings set org.gnome.desktop.interface text-scaling-factor 1.25')
