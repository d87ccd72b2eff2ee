"""multi_apps/6d72aad6: infeasible (OSWorld's evaluator is `infeasible`): LibreOffice Impress has no built-in export to a video format, and the instruction rules out every other way.
An agent's right answer is to say so: its last action is FAIL."""
from agent import Agent


def solve(env, obs):
    Agent(env).fail()
