"""chrome/af630914: the largest default font size: Settings > Appearance > Font size, "Very large"."""
import re

from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.browse("chrome://settings/appearance", re.compile("^Settings"))
    a.choose("Font size", " Very large ")
