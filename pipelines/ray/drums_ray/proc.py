"""What names one process across pid reuse: its pid and its start time."""


def start_time(pid):
    """A process's start time (clock ticks since boot, /proc/PID/stat field 22); None when it is gone."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])
