"""chrome/06fe7178: bring back the last tab shut down: the browser's window focused (a click on its
address bar, found in the accessibility tree), then Ctrl+Shift+T, the browser's "reopen closed tab"."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.click_wait("entry", "Address and search bar")
    a.hotkey("ctrl", "shift", "t")
