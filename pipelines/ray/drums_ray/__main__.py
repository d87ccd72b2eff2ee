"""python3 -m drums_ray resources: the JSON for this host's `ray start --resources`, its drums_session
slots sized from the node's ceilings (drums_ray.config); and the figures it was sized from on stderr.
python3 -m drums_ray reap-local: end what local test clusters of dead drivers left (drums_ray.local):
one ray_local_reaped record per cluster on stdout, and one ray_pools_reaped record naming the pool
directories of dead actors removed (drums_ray.node); exit 1 when a process of a cluster is left."""
import json, os, sys

from . import config


def resources():
    cfg = config.node_config()
    slots, why = config.session_slots(cfg)
    print(json.dumps({config.RESOURCE: slots}))
    print(json.dumps({"node": cfg["node"], "slots": slots, "sized_by": why, "max_sessions": cfg["max_sessions"],
                      "min_available_bytes": cfg["min_available_bytes"], "session_mib": cfg["session_mib"],
                      "mem_available_bytes": config.mem_available_bytes()}), file=sys.stderr)
    return 0


def reap_local():
    from . import local, node
    reaped = local.reap_orphans()
    for r in reaped:
        print(json.dumps(r))
    pools = node.reap_dead_pool_bases()
    if pools:
        print(json.dumps({"type": "ray_pools_reaped", "dirs": [os.path.join(node.POOL_BASES, d) for d in pools]}))
    return 1 if any(r["left_pids"] for r in reaped) else 0


def main():
    commands = {"resources": resources, "reap-local": reap_local}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        print("usage: python3 -m drums_ray resources | reap-local", file=sys.stderr)
        return 2
    return commands[sys.argv[1]]()


sys.exit(main())
