"""os/ec4e3f68: vim.desktop out of GNOME Shell's favourites, keeping the others in their order, in a terminal."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.open_terminal()
    a.run_ok('gsettings set org.gnome.shell favorite-apps "$(gsettings get org.gnome.shell favorite-apps | sed "s/\'vim.desktop\', //; s/, \'vim.desktop\'//; s/\'vim.desktop\'//")"')
