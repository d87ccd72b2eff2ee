"""chrome/3720f614: infeasible (OSWorld's evaluator is `infeasible`): Xenothian is a made-up language: Chrome offers no such interface language.
An agent's right answer is to say so: its last action is FAIL."""
from agent import Agent


def solve(env, obs):
    Agent(env).fail()
