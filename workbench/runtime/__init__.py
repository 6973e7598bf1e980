"""The runtime: compiled envs as device-resident replicas (env, store), their registry, on-device
action sampling, the counter-based random streams, trajectory recording and the cross-target check."""
