"""os/e0df059f: rename the directory ~/Desktop/todo_list_Jan_1 to todo_list_Jan_2, in a terminal."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.open_terminal()
    a.run_ok('mv ~/Desktop/todo_list_Jan_1 ~/Desktop/todo_list_Jan_2')
