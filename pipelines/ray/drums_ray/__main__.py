"""python3 -m drums_ray resources: the JSON for this host's `ray start --resources`, its drums_session
slots sized from the node's ceilings (drums_ray.config); and the figures it was sized from on stderr."""
import json, sys

from . import config


def main():
    if sys.argv[1:] != ["resources"]:
        print("usage: python3 -m drums_ray resources", file=sys.stderr)
        return 2
    cfg = config.node_config()
    slots, why = config.session_slots(cfg)
    print(json.dumps({config.RESOURCE: slots}))
    print(json.dumps({"node": cfg["node"], "slots": slots, "sized_by": why, "max_sessions": cfg["max_sessions"],
                      "min_available_bytes": cfg["min_available_bytes"], "session_mib": cfg["session_mib"],
                      "mem_available_bytes": config.mem_available_bytes()}), file=sys.stderr)
    return 0


sys.exit(main())
