"""chrome/2ae9ba84: the profile's name "Thomas": Settings > You > Customize your profile
(chrome://settings/manageProfile), its Name field, replaced and confirmed with Enter."""
import re

from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.browse("chrome://settings/manageProfile", re.compile("^Settings"))
    a.click_wait("entry", "Name")
    a.hotkey("ctrl", "a")
    a.write("Thomas\n")
    a.press("tab")  # the name is saved when the field loses focus
    a.wait("entry", "Name", text="Thomas")
