"""chrome/030eeff7: Do Not Track on: Settings > Privacy and security > Third-party cookies, its toggle
"Send a "Do Not Track" request...", then the dialog's Confirm."""
import re

from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.browse("chrome://settings/cookies", re.compile("^Settings"))
    a.toggle_on("toggle-button", re.compile("Do Not Track"))
    a.click_wait("push-button", "Confirm")
    a.wait("toggle-button", re.compile("Do Not Track"), pick=lambda n: n.state("checked") or n.state("pressed"))
