"""vlc/cb130f0d: infeasible (OSWorld's evaluator is `infeasible`): VLC has no automatic adjustment of brightness and contrast to the room's lighting (no light sensor, no such feature).
An agent's right answer is to say so: its last action is FAIL."""
from agent import Agent


def solve(env, obs):
    Agent(env).fail()
