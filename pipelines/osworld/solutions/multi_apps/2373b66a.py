"""multi_apps/2373b66a: sar (sysstat) samples the CPU every second for 30 seconds into
~/Desktop/System_Resources_Report.txt, in a terminal."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.open_terminal()
    a.run_ok("sar -u 1 30 > ~/Desktop/System_Resources_Report.txt", timeout=90)
