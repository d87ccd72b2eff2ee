"""Run an OSWorld script unchanged with the Drums provider registered first:

    python3 -m drums_osworld run.py --provider_name drums --path_to_vm CHECKPOINT.json ...

register() has to run in the script's process before DesktopEnv is built; OSWorld's scripts import
DesktopEnv at their top, so this runs the script as __main__ after registering (docs/osworld.md)."""
import runpy
import sys

from . import register

if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
    print(__doc__.strip())
    sys.exit(0 if len(sys.argv) >= 2 else 2)
register()
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(script)))
runpy.run_path(script, run_name="__main__")
