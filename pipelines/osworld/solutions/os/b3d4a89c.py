"""os/b3d4a89c: infeasible (OSWorld's evaluator is `infeasible`): the machine has no Bluetooth adapter to switch on.
An agent's right answer is to say so: its last action is FAIL."""
from agent import Agent


def solve(env, obs):
    Agent(env).fail()
