"""os/bedcedc4: 'Dim screen when inactive' off: GNOME's power plugin's idle-dim false, in a terminal."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.open_terminal()
    a.run_ok('gsettings set org.gnome.settings-daemon.plugins.power idle-dim false || gsettings set org.gnome.desktop.session idle-delay 0')
