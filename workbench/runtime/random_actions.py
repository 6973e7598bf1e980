"""Uniformly random actions on the device (Env.sample_actions), and a random policy's steps
(Env.random_steps: discrete actions drawn by the step kernel itself), on GPUs replayed in blocks from
one CUDA graph; `rollout_throughput`, a random policy's env-steps/s (the CLI's `rollouts`)."""
from __future__ import annotations

import time
import weakref

import numpy as np
import torch

from ..compiler.envdef import Box, Discrete, MultiDiscrete
from ..errors import WorkbenchError


class RandomActions:
    """An env's random actions, drawn from its own generator (env._generator, which checkpoints and
    evaluation save and restore) into its action array."""
    BLOCK = 32  # random steps per CUDA graph replay

    def __init__(self, env):
        self.env = weakref.proxy(env)  # the env owns this: no cycle to keep a dropped env's arrays alive
        self.uniform = self.scale = self.offset = None  # a Box's or MultiDiscrete's, made on first use
        self.graph = None  # ((seed, span), CUDAGraph) of BLOCK random steps; None after the env's arrays move

    def _buffers(self):
        env, space = self.env, self.env.action_space
        if self.uniform is not None or isinstance(space, Discrete):
            return
        self.uniform = torch.empty(env.store["action"].shape, dtype=torch.float32, device=env.device)
        if isinstance(space, MultiDiscrete):
            self.scale = torch.tensor(space.nvec, dtype=torch.float32, device=env.device)
            self.offset = torch.zeros_like(self.scale)
        else:
            low, high = finite_bounds(space, env.device)
            self.scale, self.offset = high - low, low

    def draw(self) -> torch.Tensor:
        """Uniformly random actions for every agent into the env's action array (returned)."""
        env, space = self.env, self.env.action_space
        buf = env.store["action"]
        if isinstance(space, Discrete):
            torch.randint(0, space.n, buf.shape, generator=env._generator, out=buf, device=env.device)
            return buf
        self._buffers()
        torch.rand(buf.shape, generator=env._generator, out=self.uniform, device=env.device)
        return self.from_uniform(self.uniform)

    def from_uniform(self, uniform) -> torch.Tensor:
        """Uniformly random actions from uniforms in [0, 1) shaped as the action array, into it (returned)."""
        env, space = self.env, self.env.action_space
        buf = env.store["action"]
        if isinstance(space, Discrete):
            buf.copy_(uniform.mul(space.n).floor_().clamp_(max=space.n - 1))
            return buf
        self._buffers()
        if uniform is not self.uniform:
            self.uniform.copy_(uniform)
        self.uniform.mul_(self.scale).add_(self.offset)
        if isinstance(space, MultiDiscrete):
            self.uniform.floor_()
        buf.copy_(self.uniform)
        return buf

    def steps(self, steps: int):
        """Env.random_steps."""
        env = self.env
        if int(steps) != steps or steps < 1:
            raise ValueError(f"random_steps: steps must be a positive integer, got {steps!r}")
        left = int(steps)
        drawn = not isinstance(env.action_space, Box)  # the step kernel draws them (codegen.drawn_actions)
        graphed = (env.step_graphs and env.device.type == "cuda" and env.recorder is None and not env.debug
                   and not torch.cuda.is_current_stream_capturing())
        if env._action_check.pending:
            env._action_check.report()
        if graphed and left >= self.BLOCK:
            key = (env.seed, env.replicas_per_seed)
            if self.graph is None or self.graph[0] != key:
                self._buffers()  # (made before the capture, without drawing)
                graph = torch.cuda.CUDAGraph()
                if not drawn:
                    graph.register_generator_state(env._generator)
                with torch.cuda.graph(graph):
                    for _ in range(self.BLOCK):
                        if not drawn:
                            self.draw()
                        env.kernels.step(*env._scalars(), env._views, draw=int(drawn))
                self.graph = (key, graph)
            while left >= self.BLOCK:
                self.graph[1].replay()
                env._clock += self.BLOCK
                left -= self.BLOCK
        for _ in range(left):
            if drawn:
                env._advance(draw=True)
            else:
                env.step(self.draw())
        return env.store["obs"], env.store["reward"], env._done, env.info


def finite_bounds(space: Box, device) -> tuple:
    """(low, high) as device tensors broadcastable to [E, A, n]."""
    low = np.broadcast_to(np.asarray(space.low, dtype=np.float32), space.shape)
    high = np.broadcast_to(np.asarray(space.high, dtype=np.float32), space.shape)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise WorkbenchError("random continuous actions need finite Box bounds")
    return torch.tensor(low.copy(), device=device), torch.tensor(high.copy(), device=device)


def rollout_throughput(env, steps: int) -> float:
    """Env-steps/s (replica steps, random actions sampled on the device) over `steps` steps, after three
    warm-up steps; the device synchronised before each clock reading."""
    env.reset()
    for _ in range(3):
        env.step(env.sample_actions())
    _synchronize(env)
    start = time.perf_counter()
    for _ in range(steps):
        env.step(env.sample_actions())
    _synchronize(env)
    return steps * env.num_envs / (time.perf_counter() - start)


def _synchronize(env) -> None:
    if env.device.type == "cuda":
        torch.cuda.synchronize()
