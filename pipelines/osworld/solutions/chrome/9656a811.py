"""chrome/9656a811: Safe Browsing on: Settings > Privacy and security > Security, "Standard protection"
(the task's setup turned it off: "No protection")."""
import re

from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.browse("chrome://settings/security", re.compile("^Settings"))
    a.click_wait("radio-button", "Standard protection")
    a.wait("radio-button", "Standard protection", pick=lambda n: n.state("checked"))
