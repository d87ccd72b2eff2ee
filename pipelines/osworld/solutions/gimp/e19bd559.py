"""gimp/e19bd559: infeasible (OSWorld's evaluator is `infeasible`): there is no photo on the Desktop to tone down (the task's setup puts none there).
An agent's right answer is to say so: its last action is FAIL."""
from agent import Agent


def solve(env, obs):
    Agent(env).fail()
