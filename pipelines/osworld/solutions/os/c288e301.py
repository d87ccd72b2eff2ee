"""os/c288e301: infeasible (OSWorld's evaluator is `infeasible`): there is no Python 4: no release exists to make the default.
An agent's right answer is to say so: its last action is FAIL."""
from agent import Agent


def solve(env, obs):
    Agent(env).fail()
