"""The cell rig behind scripts/cell: topology (namespaces, bridge, veths), replicas (voltlockd
processes and their status), faults (partitions, netem) and linkemu (netem where the kernel has
none). state.py says what is remembered between commands, util.py holds the OS plumbing."""
