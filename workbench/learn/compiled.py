"""torch.compile where it measurably helps: the learner's minibatch loss (gathers, advantage
normalisation, forward and backward), the rollout's policy step, the step's bookkeeping and GAE,
on GPU targets when `compile` is set. Each fuses dozens of small elementwise kernels
into a few; the first call compiles (during the eager first iteration, before the CUDA graph is
captured), later calls, and the graph's replays, run the fused kernels. A function that fails to
compile runs eagerly from then on, after a one-line warning naming why.
"""
from __future__ import annotations

import warnings

import torch
from ..errors import WorkbenchWarning


warnings.filterwarnings("ignore", message=r"\s*Online softmax is disabled", category=UserWarning)


class MaybeCompiled:
    """`fn`, compiled with torch.compile when `enabled`, falling back to `fn` if compiling fails."""

    def __init__(self, fn, enabled: bool, name: str):
        self.fn, self.name = fn, name
        self.compiled = torch.compile(fn, dynamic=False) if enabled else None

    def __call__(self, *args, **kwargs):
        if self.compiled is not None:
            try:
                return self.compiled(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - any compiler failure: run the same function eagerly
                warnings.warn(f"torch.compile of {self.name} failed ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:160] if str(exc) else ''}); it runs eagerly",
                              WorkbenchWarning, stacklevel=2)
                self.compiled = None
        return self.fn(*args, **kwargs)


def forward(model, obs, state, central: bool):
    """The policy's head output [N, D] and the values ([N], or [E, n] from the joint states [E, S]
    of a centralised critic) of obs [N, O]."""
    if central:
        return model.actor(obs), model.values(state)
    return model(obs)


def policy_step(model, head, obs, state, noise, central: bool):
    """One policy step for a group: obs [N, O] (state [E, S] for a centralised critic), noise [N, D]
    (uniform for discrete heads, normal for Gaussian ones) -> actions [N, ...], log pi(a|s) [N],
    values ([N] or [E, n])."""
    out, value = forward(model, obs, state, central)
    out = out.float()
    log_std = getattr(model, "log_std", None)
    if head.kind != "gaussian":
        noise = noise.clamp(1e-10, 1.0)  # uniform draws for the Gumbel trick: log(-log(0)) is inf
    actions = head.sample(out, log_std, noise)
    return actions, head.log_prob(out, log_std, actions), value.float()


def act_and_record(model, head, obs, state, noise, central: bool, actions_out, logp_out, values_out):
    """`policy_step`, writing actions, log-probabilities and values into the rollout buffer's
    step t (actions_out [N, ...], logp_out and values_out [E, n]) inside the same fused kernels;
    returns the actions [N, ...] for the env."""
    actions, logp, value = policy_step(model, head, obs, state, noise, central)
    actions_out.copy_(actions.reshape(actions_out.shape))
    logp_out.copy_(logp.reshape(logp_out.shape))
    values_out.copy_(value.reshape(values_out.shape))
    return actions


def value_step(model, obs, state, central: bool):
    """V of obs [N, O] (or of the joint state [E, S]) as float32."""
    if central:
        return model.values(state).float()
    value = model.value(obs) if hasattr(model, "value") else model(obs)[1]
    return value.float()
