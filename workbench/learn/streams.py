"""The learner's random numbers: one counter-based stream per member, drawn for all members at once.

A population trains M members in one program, and member k must draw exactly the numbers a
standalone run with seed + k draws. A torch.Generator cannot give M streams in one kernel, so every
draw is a hash of (the member's seed, the iteration, the call site, the element's index within the
member): the numbers of member k do not depend on how many members run beside it, nor on how a
draw is split into blocks. A standalone run is a population of one and draws the same way.

    streams = MemberStreams([seed + 1 + k for k in range(M)], device)
    u = streams.uniform(out, site=3)   # out [M, n]: u[k, i] = U(0, 1) of member k's element i
    streams.advance()                  # once per iteration, on the device (a CUDA graph replays it)

The hash is two rounds of a 32-bit multiply-xorshift mixer (constants < 2**31, so int64 products
never overflow) over int64 tensors: elementwise kernels only, no host values per call, nothing
allocated after the first call of a shape (so the draws can be captured in a CUDA graph).
"""
from __future__ import annotations

import math

import torch

# Call sites: each draw of an iteration has its own, so no two draws share numbers. Within one algorithm
# they never meet while there are fewer than 500 policies, 1000 epochs (config's limit) and 2000 DDPG updates
# an iteration (config's limit).
def rollout_site(policy: int) -> int:
    """The on-policy rollout's action noise of the policy-th policy."""
    return policy


def exploration_site(policy: int) -> int:
    """DDPG's exploration noise."""
    return 500 + policy


def minibatch_site(policy: int, epoch: int) -> int:
    """PPO's minibatch permutation of an epoch (A2C takes its batch whole)."""
    return 1000 * (policy + 1) + epoch


def replay_site(policy: int, update: int) -> int:
    """DDPG's replay sample of an update."""
    return 2000 * (policy + 1) + update


def random_policy_site() -> int:
    """Evaluation's uniformly random actions (a policy replaced by random play; its streams are not training's)."""
    return 10**7


_MASK = 0xFFFFFFFF
_M1, _M2 = 0x21F0AAAD, 0x735A2D97
_GOLDEN = 0x9E3779B9


def _mix(x):
    """A 32-bit avalanche mixer on int64 tensors holding values in [0, 2**32)."""
    x = ((x ^ (x >> 16)) * _M1) & _MASK
    x = ((x ^ (x >> 15)) * _M2) & _MASK
    return x ^ (x >> 15)


def _mix_int(x: int) -> int:
    x &= _MASK
    x = ((x ^ (x >> 16)) * _M1) & _MASK
    x = ((x ^ (x >> 15)) * _M2) & _MASK
    return x ^ (x >> 15)


def _site_term(site: int) -> int:
    return int(site) * 0x632BE5AB & _MASK


def seed_key(seed: int) -> int:
    """A member's 32-bit key from a seed of any size."""
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    return _mix_int(_mix_int(seed & _MASK) ^ _mix_int((seed >> 32) + _GOLDEN))


class MemberStreams:
    """Independent uniform and normal streams for M members (seeds: one int per member)."""

    def __init__(self, seeds, device):
        self.seeds = [int(s) for s in seeds]
        self.device = torch.device(device)
        self.keys = torch.tensor([seed_key(s) for s in self.seeds], dtype=torch.int64,
                                 device=self.device).reshape(-1, 1)
        self.counter = torch.zeros((), dtype=torch.int64, device=self.device)
        self._index: dict = {}
        self.fused = None  # a fused.FusedUniform, when the caller gives one, draws the uniforms

    @property
    def members(self) -> int:
        return len(self.seeds)

    def advance(self):
        """The next iteration's numbers (one in-place device op)."""
        self.counter.add_(1)

    def _bits(self, n: int, site: int, offset: int = 0):
        """[M, n] int64 in [0, 2**32): element i of each member hashed with the counter and the site."""
        index = self._index.get((n, offset))
        if index is None:
            index = self._index[(n, offset)] = (torch.arange(offset, offset + n, dtype=torch.int64,
                                                             device=self.device) * _GOLDEN) & _MASK
        call = _mix((self.counter * _GOLDEN + _site_term(site)) & _MASK)
        return _mix((_mix(self.keys ^ call) + index) & _MASK)

    def uniform(self, shape, site: int, offset: int = 0, out=None):
        """Uniform in (0, 1), float32 [M, *shape]; `offset` shifts the element index (a block of a
        larger draw gives the numbers the whole draw would have there). With out [M, *shape] (a view
        whose last dimension is contiguous) the numbers go there, with no copy where fused."""
        n = math.prod(shape)
        if self.fused is not None:
            if out is not None:
                return self.fused(self, n, _site_term(site), offset, out)
            return self.fused(self, n, _site_term(site), offset).reshape(self.members, *shape)
        bits = self._bits(n, site, offset)
        u = ((bits >> 8).to(torch.float32) + 0.5).mul_(2.0 ** -24).reshape(self.members, *shape)
        return u if out is None else out.copy_(u)

    def normal(self, shape, site: int, offset: int = 0, out=None):
        """Standard normal, float32 [M, *shape] (Box-Muller over two uniforms per element), or into out."""
        n = math.prod(shape)
        u = self.uniform((2 * n,), site, 2 * offset).reshape(self.members, n, 2)
        radius = torch.sqrt(-2.0 * torch.log(u[..., 0]))
        z = (radius * torch.cos((2 * math.pi) * u[..., 1])).reshape(self.members, *shape)
        return z if out is None else out.copy_(z)

    def permutations(self, n: int, site: int):
        """[M, n] int64: an independent random permutation of range(n) per member."""
        return self.uniform((n,), site).argsort(dim=1)

    def state_dict(self):
        return {"counter": self.counter.clone(), "seeds": list(self.seeds)}

    def load_state_dict(self, state):
        self.counter.copy_(state["counter"])
