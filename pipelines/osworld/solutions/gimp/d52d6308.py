"""gimp/d52d6308: the docks hidden: Windows > Hide Docks (run through "/", Search and Run a Command);
GIMP keeps it in sessionrc (hide-docks) when it quits (the evaluator quits it with Ctrl+Q). The agent
checks on the screenshot that the window changed (the docks' panels gone)."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    before = a.gimp_wait()
    a.gimp_run("hide docks")
    # The docks' panels (tool options, brushes, layers) give way to the empty canvas: over 2% of the
    # screen, the window being about a third of it, changes (3% measured).
    a.wait_screen(lambda im: a.changed(before, im) > 0.02, "GIMP without its docks", timeout=20)
