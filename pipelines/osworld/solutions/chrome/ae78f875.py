"""chrome/ae78f875: infeasible (OSWorld's evaluator is `infeasible`): the number of search results per page is a setting of the search engine's site, not of Chrome's.
An agent's right answer is to say so: its last action is FAIL."""
from agent import Agent


def solve(env, obs):
    Agent(env).fail()
