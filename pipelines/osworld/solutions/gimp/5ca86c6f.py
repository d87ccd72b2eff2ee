"""gimp/5ca86c6f: infeasible (OSWorld's evaluator is `infeasible`): GIMP has no built-in way to search for and download a logo from the web.
An agent's right answer is to say so: its last action is FAIL."""
from agent import Agent


def solve(env, obs):
    Agent(env).fail()
