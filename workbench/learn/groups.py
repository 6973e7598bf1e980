"""Agent groups: a policy map (policy name -> agent ids) checked against the env and made into index
tensors, one group a policy; what every algorithm's rollout and update gather and scatter by.
"""
from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping

import torch

from ..errors import WorkbenchError, did_you_mean


class PolicyMapError(WorkbenchError, ValueError):
    pass


class AgentGroup:
    """The agents one policy controls. Contiguous ids are served as zero-copy slices."""

    def __init__(self, name: str, agent_ids, num_agents: int, device):
        ids = [int(i) for i in agent_ids]
        if not ids:
            raise PolicyMapError(f"policy '{name}' controls no agents")
        self.name = name
        self.ids = ids
        self.n = len(ids)
        contiguous = ids == list(range(ids[0], ids[0] + len(ids)))
        self.slice = slice(ids[0], ids[0] + len(ids)) if contiguous else None
        self.index = torch.tensor(ids, dtype=torch.long, device=device)

    def gather(self, tensor):
        """tensor [E, A, ...] -> [E, n, ...] (a view when the ids are contiguous)."""
        if self.slice is not None:
            return tensor[:, self.slice]
        return tensor.index_select(1, self.index)

    def scatter(self, dest, values):
        """dest[:, ids] = values, in place."""
        if self.slice is not None:
            dest[:, self.slice].copy_(values)
        else:
            dest.index_copy_(1, self.index, values.to(dest.dtype))


def build_groups(policies, num_agents: int, device) -> list:
    """Check a policy map covers every agent exactly once and build its groups."""
    if policies is None:
        policies = {"shared": list(range(num_agents))}
    example = f"{{'shared': [0, ..., {num_agents - 1}]}}" if num_agents > 1 else "{'shared': [0]}"
    if not isinstance(policies, Mapping):
        raise PolicyMapError(f"policies must map a policy's name to its agents' ids, e.g. {example}; "
                             f"got {type(policies).__name__} {policies!r:.80}")
    seen = {}
    for name, ids in policies.items():
        if not isinstance(name, str) or not name or "/" in name:  # (metrics are named return/NAME, ...)
            raise PolicyMapError(f"a policy's name must be a non-empty string without '/', e.g. {example}; got "
                                 f"{name!r}")
        if isinstance(ids, (str, bytes, Mapping)) or not isinstance(ids, Iterable):
            raise PolicyMapError(f"policy '{name}' must list its agents' ids (a list of ints), e.g. {example}; "
                                 f"got {ids!r:.80}")
        for i in ids:
            if isinstance(i, torch.Tensor) and i.numel() == 1:
                i = i.item()
            if isinstance(i, bool) or not isinstance(i, numbers.Integral):
                raise PolicyMapError(f"policy '{name}' lists {i!r}; agent ids are ints 0..{num_agents - 1}")
            i = int(i)
            if not 0 <= i < num_agents:
                raise PolicyMapError(f"policy '{name}' names agent {i}, but the env has agents 0..{num_agents - 1}")
            if i in seen:
                raise PolicyMapError(f"agent {i} is named by policy '{seen[i]}' and by policy '{name}'; "
                                     f"each agent belongs to exactly one policy")
            seen[i] = name
    missing = sorted(set(range(num_agents)) - set(seen))
    if missing:
        shown = missing[:10]
        raise PolicyMapError(f"agents {shown}{' ...' if len(missing) > 10 else ''} belong to no policy; "
                             f"add them to the policy map")
    return [AgentGroup(name, ids, num_agents, device) for name, ids in policies.items()]


def resolve_policy_map(written, definition) -> dict:
    """A config's policy map, {policy: [AGENT_GROUPS group names or agent ids]} (a lone name for one
    group), as {policy: agent ids}; build_groups then checks that it covers every agent once."""
    groups = definition.agent_groups() or {}
    known = f"the env's groups are {sorted(groups)}" if groups else f"{definition.name} declares no AGENT_GROUPS"
    if not isinstance(written, Mapping):
        raise PolicyMapError(f"policies must map a policy's name to its groups or agent ids, e.g. "
                             f"{{shared: {sorted(groups) or [0]}}}; got {type(written).__name__} {written!r:.80}")
    resolved = {}
    for name, members in written.items():
        members = [members] if isinstance(members, (str, numbers.Integral)) else members
        if not isinstance(members, Iterable) or isinstance(members, Mapping):
            raise PolicyMapError(f"policies: policy {name!r} must list groups or agent ids, got {members!r:.80}")
        ids = []
        for member in members:
            if isinstance(member, str):
                if member not in groups:
                    raise PolicyMapError(f"policies: policy {name!r} names group {member!r}, which is not one of "
                                         f"{definition.name}'s; {known}" + did_you_mean(member, list(groups)))
                ids += groups[member]
            else:
                ids.append(member)
        resolved[name] = ids
    return resolved
