"""chrome/bb5e4c0d: Bing the default search engine: Settings > Search engine > Manage search engines
(chrome://settings/searchEngines), Microsoft Bing's "More actions" > Make default."""
import re

from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.browse("chrome://settings/searchEngines", re.compile("^Settings"))
    a.click_wait("push-button", "More actions for Microsoft Bing")
    a.click_wait("menu-item", "Make default")
    a.wait("push-button", re.compile(r"Microsoft Bing \(Default\)"))
