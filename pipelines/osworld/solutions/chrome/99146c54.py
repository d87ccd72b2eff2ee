"""chrome/99146c54: site data deleted whenever Chrome closes: Settings > Privacy and security > Site
settings > On-device site data (chrome://settings/content/siteData), "Delete data sites have saved to your
device when you close all windows"."""
import re

from agent import Agent

CHOICE = re.compile("^Delete data sites have saved to your device when you close all windows")


def solve(env, obs):
    a = Agent(env)
    a.browse("chrome://settings/content/siteData", re.compile("^Settings"))
    a.click_wait("radio-button", CHOICE)
    a.wait("radio-button", CHOICE, pick=lambda n: n.state("checked"))
