"""os/28cc3b7e: the default sink's volume to 100% with pactl (PulseAudio), in a terminal. The session's
sound server is not running until asked (a session has no systemd user manager to start it at login, and
PulseAudio's autospawn does not start it for pactl), so the agent starts it first, as the evaluator does."""
from agent import Agent


def solve(env, obs):
    a = Agent(env)
    a.open_terminal()
    a.run_ok('pulseaudio --start; pactl set-sink-volume @DEFAULT_SINK@ 100%')
