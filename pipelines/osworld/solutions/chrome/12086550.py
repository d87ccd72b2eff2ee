"""chrome/12086550: the page where Chrome keeps the passwords, Google Password Manager's list, opened
from the address bar (chrome://password-manager/passwords; nothing on it is revealed)."""
import re

from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.browse("chrome://password-manager/passwords", re.compile("Password Manager"))
