"""Keeps the recent steps of chosen replicas on the device; `pull` returns their last episode, ended by
the state that ended it (the step kernel's terminal copies, `TerminalCopies`)."""
from __future__ import annotations

import numpy as np
import torch

from ..compiler.codegen import terminal_arrays
from ..errors import WorkbenchError
from .store import _TORCH_DTYPES


class TerminalCopies:
    """The step kernel's copies of recorded replicas' terminal states (codegen.terminal_arrays), and the
    flags that say where its final observations are kept.

    `slot` [E] int32: 0 for a replica nobody records, k for one whose episode ends are copied into row
    k - 1 of `buffers` (name -> [S, *shape], S >= 1 rows). The kernels take `slot` with two flags after
    it (`tensors()`): [E] is 1 while any replica is recorded, [E + 1] is 1 while final observations are
    kept at every episode end (`keep_final_obs`; else only where truncated or while recording). Not
    recording costs the kernel one read of the flags (the same address for every replica), and memory
    4 bytes per replica plus one row of state.
    """

    def __init__(self, defn, num_envs: int, num_agents: int, device):
        self.defn, self.num_agents, self.device = defn, num_agents, device
        self.num_envs = num_envs
        self._keep_final_obs = True
        self.retired: list = []  # earlier flagged arrays, not recording, which a CUDA graph captured before may read
        self._new_slots()
        self.buffers = self._allocate(1)

    def _new_slots(self):
        # the flags sit after the slots: where no replica is recorded, a replica whose episode ends reads no
        # slot of its own (a scattered 4-byte read: CartPole at 10M replicas on an H100, 359 -> 345 us a step)
        self._flagged = torch.zeros(self.num_envs + 2, dtype=torch.int32, device=self.device)
        self._flagged[self.num_envs + 1] = int(self._keep_final_obs)
        self.slot = self._flagged[:self.num_envs]

    @property
    def keep_final_obs(self) -> bool:
        return self._keep_final_obs

    @keep_final_obs.setter
    def keep_final_obs(self, keep: bool):
        if not isinstance(keep, (bool, np.bool_)):
            raise WorkbenchError(f"keep_final_obs must be True or False, got {keep!r}")
        self._keep_final_obs = bool(keep)
        for flagged in [self._flagged] + self.retired:  # (a graph captured earlier follows it too)
            flagged[self.num_envs + 1] = int(self._keep_final_obs)

    def _allocate(self, rows: int) -> dict:
        self.rows = rows
        return {spec.name: torch.zeros((rows,) + ((self.num_agents,) if spec.layout == "agent" else ())
                                       + tuple(spec.shape), dtype=_TORCH_DTYPES[spec.dtype], device=self.device)
                for _, spec in terminal_arrays(self.defn)}

    def tensors(self) -> list:
        """The kernels' arguments after the store's arrays: the slots with the flags [E + 2], then each copy
        (kernel order)."""
        return [self._flagged] + [self.buffers[spec.name] for _, spec in terminal_arrays(self.defn)]

    def assign(self, replicas: list) -> bool:
        """Copy the episode ends of `replicas` (distinct), replica replicas[k] into row k; True when the
        arrays were replaced (the kernels' arguments changed). Nothing is freed that a graph captured
        earlier writes: the old flagged array is kept, no replica recorded, so such a graph copies nothing."""
        replaced = len(replicas) > self.rows
        if replaced:
            self.clear()
            self.retired.append(self._flagged)
            self._new_slots()
            self.buffers = self._allocate(len(replicas))
        self.clear()
        if replicas:
            index = torch.tensor(replicas, dtype=torch.long, device=self.device)
            self.slot.index_copy_(0, index, torch.arange(1, len(replicas) + 1, dtype=torch.int32, device=self.device))
            self._flagged[self.num_envs] = 1
        return replaced

    def clear(self):
        self._flagged[:self.num_envs + 1].zero_()


class TrajectoryRecorder:
    """Ring buffer over the last `capacity` steps of `replicas`.

    Each frame holds the state arrays before a step (plus obs) and that step's action, reward and
    done flag, copied device-to-device; nothing reaches the host until `pull`. The ring holds twice
    `max_steps` steps, so the last finished episode (up to `max_steps` long) stays whole however far
    the next one has run. The state an episode ended in is copied by the step kernel itself (the
    auto-reset overwrites it in the same launch): `terminal` holds one row per distinct replica.
    """

    def __init__(self, env, replicas, max_steps: int):
        self.store = env.store  # not the env, which holds this recorder: no cycle keeps a dropped env's arrays
        self.replicas = [int(r) for r in replicas]
        bad = [r for r in self.replicas if not 0 <= r < env.num_envs]
        if bad:
            raise ValueError(f"replicas {bad} out of range [0, {env.num_envs})")
        self.max_steps = int(max_steps)
        self.capacity = 2 * self.max_steps
        store = env.store
        self.index = torch.tensor(self.replicas, dtype=torch.long, device=env.device)
        self.distinct = list(dict.fromkeys(self.replicas))
        self.terminal = env.terminal
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
            torch.index_select(self.store[n], 0, self.index, out=self.buffers[n][self.pos])

    def capture_after_step(self):
        for n in self.after:
            torch.index_select(self.store[n], 0, self.index, out=self.buffers[n][self.pos])
        self.pos = (self.pos + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)

    def _terminal_frame(self, host: dict, j: int, last: int) -> dict:
        """Frame after step `last` of replica j's episode: the state that ended it (no step follows:
        action and reward zero, the flags those of the step that ended it)."""
        replica = self.replicas[j]
        row = self.distinct.index(replica)
        frame = {n: np.zeros_like(v[last, j]) for n, v in host.items()}
        for n in ("done", "terminated", "truncated"):
            frame[n] = host[n][last, j]
        for n in self.before:
            if n not in ("obs", "t"):
                frame[n] = self.terminal.buffers[n][row].cpu().numpy()
        frame["obs"] = self.store["final_obs"][replica].cpu().numpy()
        frame["t"] = host["t"][last, j] + 1
        return frame

    def pull(self) -> list:
        """Per replica: {name: array [T, ...]} of its last finished episode (or the running one), with
        `complete` (it ended and every one of its steps is here), `steps_missing` (steps of it that
        came before the recording began or past the capacity) and `terminal_frame` (its last frame is
        the state it ended in, after its last step: T = steps + 1)."""
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
            ended = bool(len(ends))
            if ended:
                final = self._terminal_frame(host, j, stop - 1)
                episode = {n: np.concatenate([v, final[n][None]]) for n, v in episode.items()}
            episode["replica"] = replica
            # complete: it ended and its first step is in the buffer (t = 0 before it); an episode whose
            # start came before the recording began (or was overwritten) is a tail, not an episode
            episode["complete"] = bool(len(ends)) and stop > start and int(host["t"][start, j]) == 0
            episode["steps_missing"] = int(host["t"][start, j]) if stop > start else 0
            episode["terminal_frame"] = ended
            episodes.append(episode)
        return episodes
