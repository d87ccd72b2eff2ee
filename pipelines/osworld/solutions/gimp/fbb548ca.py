"""gimp/fbb548ca: infeasible (OSWorld's evaluator is `infeasible`): GIMP 2.10 has no colour theme named "Blue" (its themes: Dark, Gray, Light, System).
An agent's right answer is to say so: its last action is FAIL."""
from agent import Agent


def solve(env, obs):
    Agent(env).fail()
