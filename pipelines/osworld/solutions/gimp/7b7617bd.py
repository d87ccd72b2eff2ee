"""gimp/7b7617bd: at least 100 undo steps: Edit > Preferences (through "/", Search and Run a Command),
System Resources (the page it opens on), "Minimal number of undo levels" 100 (the page's first field),
OK (Alt+O). GIMP writes gimprc when it quits (the evaluator quits it with Ctrl+Q)."""
import time

from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.gimp_wait()
    a.gimp_run("preferences")
    a.press("tab")  # from the page list to the page's first field
    a.hotkey("ctrl", "a")
    a.write("100")
    a.press("tab")
    a.hotkey("alt", "o")
    time.sleep(2)
