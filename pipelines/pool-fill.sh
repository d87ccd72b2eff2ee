#!/bin/sh
# Kept for compatibility: the warm pool is drums-pool(1) now; this runs `drums-pool fill` with the same options.
here=${0%/*}; [ "$here" = "$0" ] && here=.; [ -x "$here/../target/release/drums-pool" ] && PATH="$here/../target/release:$PATH"; exec drums-pool fill "$@"
