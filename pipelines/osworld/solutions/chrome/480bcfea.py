"""chrome/480bcfea: infeasible (OSWorld's evaluator is `infeasible`): the 2023 Chrome UI (Chrome Refresh 2023) can no longer be turned off: the flag that did so is gone.
An agent's right answer is to say so: its last action is FAIL."""
from agent import Agent


def solve(env, obs):
    Agent(env).fail()
