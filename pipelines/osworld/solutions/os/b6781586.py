"""os/b6781586: the time zone to UTC+0 with timedatectl, in a terminal, as root through sudo (the machine's
password, `password`, is what OSWorld tells its agents), then the zone read back, as an agent would check
its work. timedatectl asks systemd-timedated, which D-Bus starts on the session's system bus (docs/osworld.md,
"The OSWorld image's desktop"). On Drums it stops at timedatectl's own test for systemd as PID 1 ("System
has not been booted with systemd as init system (PID 1). Can't operate."): the session's init is Drums', and
nothing here claims otherwise; the solution then ends with that AgentError, and the task scores 0 (the
evaluator's `timedatectl status` stops the same way)."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.open_terminal()
    a.run_ok('echo password | sudo -S timedatectl set-timezone UTC')
    a.run_ok("timedatectl status | grep -E 'Time zone: .*, \\+0000\\)$'")
