"""Keeps the recent steps of chosen replicas on the device; `pull` returns their last episode."""
from __future__ import annotations

import numpy as np
import torch


class TrajectoryRecorder:
    """Ring buffer over the last `capacity` steps of `replicas`.

    Each frame holds the state arrays before a step (plus obs) and that step's action,
    reward and done flag, copied device-to-device; nothing reaches the host until `pull`.
    """

    def __init__(self, env, replicas, capacity: int):
        self.env = env
        self.replicas = [int(r) for r in replicas]
        bad = [r for r in self.replicas if not 0 <= r < env.num_envs]
        if bad:
            raise ValueError(f"replicas {bad} out of range [0, {env.num_envs})")
        self.capacity = int(capacity) + 1
        store = env.store
        self.index = torch.tensor(self.replicas, dtype=torch.long, device=env.device)
        self.before = [n for n, s in env.definition.arrays.items() if s.owner == "env"] + ["obs", "t"]
        self.after = ["action", "reward", "done", "terminated", "truncated"]
        self.buffers = {n: torch.zeros((self.capacity, len(self.replicas)) + tuple(store[n].shape[1:]),
                                       dtype=store[n].dtype, device=env.device) for n in self.before + self.after}
        self.pos = 0
        self.count = 0

    def restart(self):
        self.pos = 0
        self.count = 0

    def capture_before_step(self):
        for n in self.before:
            torch.index_select(self.env.store[n], 0, self.index, out=self.buffers[n][self.pos])

    def capture_after_step(self):
        for n in self.after:
            torch.index_select(self.env.store[n], 0, self.index, out=self.buffers[n][self.pos])
        self.pos = (self.pos + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)

    def pull(self) -> list:
        """Per replica: {name: array [T, ...]} of its last finished episode (or the running one), with
        `complete` (it ended and every one of its steps is here) and `steps_missing` (steps of it that
        came before the recording began or past the capacity)."""
        order = [(self.pos - self.count + k) % self.capacity for k in range(self.count)]
        host = {n: b.cpu().numpy()[order] for n, b in self.buffers.items()}
        episodes = []
        for j, replica in enumerate(self.replicas):
            done = host["done"][:, j].astype(bool)
            ends = np.flatnonzero(done)
            if len(ends) == 0:
                start, stop = 0, len(done)
            else:
                stop = ends[-1] + 1
                start = ends[-2] + 1 if len(ends) > 1 else 0
            episode = {n: v[start:stop, j] for n, v in host.items()}
            episode["replica"] = replica
            # complete: it ended and its first step is in the buffer (t = 0 before it); an episode whose
            # start came before the recording began (or was overwritten) is a tail, not an episode
            episode["complete"] = bool(len(ends)) and stop > start and int(host["t"][start, j]) == 0
            episode["steps_missing"] = int(host["t"][start, j]) if stop > start else 0
            episodes.append(episode)
        return episodes
