# Drums clone hygiene for Python in a session (installed into the session template layer by
# pipelines/setup.d/template.sh; see drums-guest(1), "CLONE HYGIENE"). Restored clones of a checkpoint
# share the memory of every Python process, so `random` (and numpy's global generator) would produce the
# same numbers in every clone. SIGUSR1 reseeds them from the kernel. When DRUMS_RESEED_LOG names a file,
# each reseed appends "<pid> <fingerprint>" to it; the fingerprint is a digest of the new state.


def _drums_install_reseed():
    import os
    import signal
    import sys

    def fingerprint():
        import hashlib
        import random

        return hashlib.sha256(repr(random.getstate()).encode()).hexdigest()[:32]

    def reseed(signum, frame):
        import random

        random.seed(os.urandom(32))
        np = sys.modules.get("numpy")
        if np is not None and hasattr(np, "random"):
            np.random.seed([int.from_bytes(os.urandom(4), "little") for _ in range(8)])
        log = os.environ.get("DRUMS_RESEED_LOG")
        if log:
            try:
                with open(log, "a") as f:
                    f.write(f"{os.getpid()} {fingerprint()}\n")
            except OSError:
                pass

    try:
        # A program that set its own SIGUSR1 disposition before site ran (or ignores it) keeps it.
        if signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:
            signal.signal(signal.SIGUSR1, reseed)
    except (ValueError, OSError, AttributeError):
        pass


_drums_install_reseed()
del _drums_install_reseed
