"""chrome/93eabf48: dark mode off: Settings > Appearance (chrome://settings/appearance, the page the
evaluator also wants left open), Mode "Light". Untested: desktop-env 1.0.2 has no getter
`chrome_appearance_mode_ui`, so DesktopEnv refuses the task file before any action (docs/osworld.md)."""
import re

from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.browse("chrome://settings/appearance", re.compile("^Settings"))
    a.choose("Mode", " Light ")
