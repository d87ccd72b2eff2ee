"""gimp/7767eef2: GIMP's Light theme: Edit > Preferences (through "/", Search and Run a Command),
Interface > Theme (the eighth row below System Resources, where the page list opens), "Light" (the third
theme, after Dark and Gray), OK (Alt+O). GIMP applies a theme when it is chosen, so the agent sees the
window turn light; it writes gimprc when it quits (the evaluator quits it with Ctrl+Q)."""
import time

from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.gimp_wait()
    a.gimp_run("preferences")
    a.press("down", 8)  # Debugging, Color Management, Image Import & Export, Tool Options, Default Image, Default Grid, Interface, Theme
    time.sleep(1)
    a.press("tab")  # into the theme list, on the current theme (Dark)
    a.press("down", 2)
    # The dark greys give way to light ones.
    a.wait_screen(lambda im: a._gimp_grey(im) < 0.05, "GIMP in its Light theme", timeout=30)
    a.hotkey("alt", "o")
    time.sleep(2)
