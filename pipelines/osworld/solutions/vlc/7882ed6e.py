"""vlc/7882ed6e: infeasible (OSWorld's evaluator is `infeasible`): films bought on Google Play Movies & TV play only in Google's own apps (DRM); VLC cannot play them.
An agent's right answer is to say so: its last action is FAIL."""
from agent import Agent


def solve(env, obs):
    Agent(env).fail()
