"""What a trainer's checkpoint holds, and putting it back: policies, optimisers (with the learning-rate
tensors a captured graph reads), normalisers, replay buffers, counters and history, random streams,
the env's state, the CPU thread counts the run measured, and a registered env's source (so that a
new process can rebuild the env: runs.load_checkpoint). The file itself: checkpoint.py.
"""
from __future__ import annotations

import warnings

import torch

from . import checkpoint as ckpt
from . import config as cfg
from . import distributed as dist_mod
from . import population, threads
from .provenance import provenance
from .learners import hidden_activation
from .algorithms import ddpg
from .members import MemberAdam
from ..runtime import registry
from ..errors import WorkbenchWarning


def signature(tr) -> dict:
    """What must match between a checkpoint and the trainer that loads it (the network's shape too:
    hidden_sizes, activation, shared_body; checkpoints from before it was recorded lack those keys)."""
    return {"env": tr.env.name, "num_agents": tr.env.num_agents, "obs_shape": list(tr.env.obs_shape),
            "action_space": repr(tr.env.action_space), "policies": {g.name: g.ids for g in tr.groups},
            "algorithm": tr.algorithm, "normalize_obs": bool(tr.norms), "centralised_critic": sorted(tr.central),
            "members": tr.M, "hidden_sizes": list(tr.config.hidden_sizes),
            "activation": hidden_activation(tr.config),
            "shared_body": bool(tr.config.shared_body)}


# the value a key has in checkpoints written before the signature held it (None: not compared)
SIGNATURE_DEFAULTS = {"centralised_critic": [], "members": 1, "hidden_sizes": None, "activation": None,
                      "shared_body": None}
NETWORK = ("hidden_sizes", "activation", "shared_body", "centralised_critic")


def check_signature(tr, theirs: dict, path):
    """CheckpointError naming the first field where checkpoint and trainer differ, both values and the fix."""
    for key, mine in signature(tr).items():
        if key not in theirs and key in SIGNATURE_DEFAULTS and SIGNATURE_DEFAULTS[key] is None:
            continue  # (not recorded then: check_shapes compares the weights themselves)
        saved = theirs.get(key, SIGNATURE_DEFAULTS.get(key))
        if mine != saved:
            fix = (f"build the trainer with the checkpoint's network: replace(config, {key}={saved!r})"
                   if key in NETWORK else "load it into a trainer of the same env, policies and config")
            raise ckpt.CheckpointError(f"checkpoint {str(path)!r} was written for {key}={saved!r}; this trainer "
                                       f"has {key}={mine!r}: {fix}")


def check_shapes(tr, saved_models: dict, path):
    """CheckpointError (not torch's size mismatch) where a saved policy's parameters are not the
    trainer's: another network (a checkpoint without the network in its signature, or a custom model)."""
    for name, saved in saved_models.items():
        if name not in tr.models:
            raise ckpt.CheckpointError(f"checkpoint {str(path)!r} holds policy {name!r}, which this trainer lacks "
                                       f"(its policies: {sorted(tr.models)})")
        mismatch = ckpt.shape_mismatch(saved, tr.models[name].state_dict())
        if mismatch is not None:
            key, theirs, mine = mismatch
            raise ckpt.CheckpointError(
                f"checkpoint {str(path)!r}: policy {name!r} parameter {key!r} is {theirs} there and {mine} in "
                f"this trainer: another network; build the trainer with the checkpoint's hidden_sizes, "
                f"shared_body and centralised_critic (torch.load(path, weights_only=False)['config']), or, for "
                f"a run of a model of your own, pass the same models= again (wb.load_policy, wb.replay, "
                f"wb.train(resume=...), Trainer)")


def _optimizers(tr):
    """Every optimiser, in a fixed order (DDPG's are (actor, critic) pairs)."""
    for opt in tr.optimizers.values():
        yield from (opt if isinstance(opt, tuple) else (opt,))


def state(tr) -> dict:
    """The trainer's whole state as a checkpoint payload (host tensors for the env)."""
    return {
        "signature": signature(tr),
        "config": cfg.to_dict(tr.config),
        "models": {n: m.state_dict() for n, m in tr.models.items()},
        "optimizers": {n: (o.state_dict() if not isinstance(o, tuple) else [x.state_dict() for x in o])
                       for n, o in tr.optimizers.items()},
        "norms": {n: norm.state_dict() for n, norm in tr.norms.items()},
        "reward_scales": {n: scale.state_dict() for n, scale in tr.reward_scales.items()},
        "iteration": tr.iteration, "env_steps": tr.env_steps, "history": tr.history,
        "rng": {"torch": torch.get_rng_state(), "generator": tr.generator.get_state(),
                "env_generator": tr.env._generator.get_state(), "streams": tr.streams.state_dict()},
        "world_size": tr.world_size,
        "threads": tr.threads,
        **rank_state(tr),  # (the env's state and seed, DDPG's replay)
        "env_source": registry.stored(tr.env.definition),  # None for a shipped env
        "env_digest": registry.source_digest(tr.env.definition),
        "provenance": provenance(tr),
        "population": ({"members": tr.M, "layout": population.stacked_layout(tr.models),
                        "replicas_per_member": tr.E_member} if tr.M > 1 else None),
    }


def save(tr, path):
    """Write `tr`'s checkpoint to `path` (atomically) on the main rank; every rank of a distributed
    run calls it, since each sends what is its own."""
    if tr.ranks is not None:  # a split population: every rank's members into rank 0's one checkpoint
        parts = tr.ranks.gather(ckpt.to_host(state(tr)))
        return ckpt.save_atomic(population.merge_payloads(parts), path) if tr.is_main else None
    if tr.sync is not None:  # data parallel: the other ranks' own env and replay, for a resume on as many ranks
        parts = tr.sync.gather_to_main(None if tr.is_main else ckpt.to_host(rank_state(tr)))
        return ckpt.save_atomic({**state(tr), "ranks": parts}, path) if tr.is_main else None
    return ckpt.save_atomic(state(tr), path) if tr.is_main else None


def rank_state(tr) -> dict:
    """What differs between the ranks of a data-parallel run (the rest they hold alike): the env's
    state (host tensors) and seed, DDPG's replay buffers and normalize_reward's running returns. A
    data-parallel checkpoint holds rank 0's in its own keys and rank r's in "ranks"[r] (None for rank 0:
    not stored twice)."""
    return {"env_state": {k: v.detach().cpu() for k, v in tr.env.store.items()}, "env_seed": tr.env.seed,
            "replay": {n: b.state_dict() for n, b in tr.buffers.items() if isinstance(b, ddpg.ReplayBuffer)},
            "reward_returns": {n: scale.returns.detach().cpu() for n, scale in tr.reward_scales.items()}}


def load_member_adam(optimizer, saved: dict):
    """Put an exported member's Adam moments (population.member_payload) into a standalone trainer's
    optimiser: a MemberAdam of one member (on-policy runs), or torch Adam (DDPG's), whatever its
    implementation (fused and capturable on a GPU, plain on the CPU)."""
    if isinstance(optimizer, MemberAdam):
        optimizer.load_moments(saved["step"], saved["lr"], saved["exp_avg"], saved["exp_avg_sq"])
        return
    group = optimizer.param_groups[0]
    for p, exp_avg, exp_avg_sq in zip(group["params"], saved["exp_avg"], saved["exp_avg_sq"]):
        on_device = group.get("fused") or group.get("capturable")
        optimizer.state[p] = {"step": torch.tensor(saved["step"], dtype=torch.float32,
                                                   device=p.device if on_device else "cpu"),
                              "exp_avg": exp_avg.to(p.device).clone(), "exp_avg_sq": exp_avg_sq.to(p.device).clone()}
    if isinstance(group["lr"], torch.Tensor):
        group["lr"].fill_(saved["lr"])
    else:
        group["lr"] = saved["lr"]


def restore(tr, payload: dict, path, restore_env: bool = True):
    """Put a checkpoint payload back into trainer `tr` (written for the same env and policy map); a
    rank of a population split over ranks takes its own members out of the whole population's."""
    if tr.ranks is not None and (payload.get("population") or {}).get("members") == tr.ranks.context.world_size * tr.M:
        start = tr.members[0].index
        payload = population.slice_payload(payload, start, start + tr.M)
    check_signature(tr, payload["signature"], path)
    check_shapes(tr, payload["models"], path)
    for n, saved in payload["models"].items():
        tr.models[n].load_state_dict(saved)
    rates = _learning_rates(tr)  # the config's (anneal_lr recomputes them each iteration from it)
    for n, saved in payload["optimizers"].items():
        opt = tr.optimizers[n]
        for o, s in zip(opt, saved) if isinstance(opt, tuple) else ((opt, saved),):
            if isinstance(s, dict) and s.get("member_adam"):
                load_member_adam(o, s)
            else:
                o.load_state_dict(s)
    _keep_lr_tensors(tr)
    _set_learning_rates(rates)  # a resume's lr, not the saved optimiser's
    # this rank's env and replay: the payload's own keys for rank 0, one process or a split population's
    # rank (its slice); "ranks"[r] for rank r of a data-parallel run; None when saved by another rank count
    ranks = payload.get("ranks") or [None]
    own = (None if len(ranks) != tr.world_size
           else payload if tr.sync is None or tr.rank == 0 else ranks[tr.rank])
    for n, saved in (own or payload).get("replay", {}).items():
        if isinstance(tr.buffers.get(n), ddpg.ReplayBuffer):  # (a policy frozen now keeps none)
            tr.buffers[n].load_state_dict(saved)
    for n, saved in payload["norms"].items():
        tr.norms[n].load_state_dict(saved)
    # (a checkpoint from before normalize_reward was on, or from before it existed, leaves them as they start)
    for n, saved in payload.get("reward_scales", {}).items():
        if n in tr.reward_scales:
            tr.reward_scales[n].load_state_dict(saved)
    tr.iteration, tr.env_steps = payload["iteration"], payload["env_steps"]
    tr.history = list(payload["history"])
    # (payload["rng"]["torch"], the global stream's state when saved, is not put back: training never
    # draws from it, and loading leaves the caller's global stream alone)
    if not _set_generator(tr.generator, payload["rng"]["generator"]):  # written on another kind of device
        tr.generator.manual_seed(tr.config.seed * 2**20 + tr.iteration)
        if restore_env:
            warnings.warn("checkpoint written on another kind of device: its random streams cannot be continued "
                          "here, so this run and its env draw from new ones (seeded by seed and iteration)",
                          WorkbenchWarning, stacklevel=3)
    if "streams" in payload["rng"]:
        tr.streams.load_state_dict(payload["rng"]["streams"])
    if tr.rank > 0:  # the checkpoint holds rank 0's stream: every other rank continues on its own
        tr.generator.manual_seed(dist_mod.rank_seed(tr.config.seed + 1, tr.rank) * 2**20 + tr.iteration)
    tr.graph.invalidate()
    tr.refresh_rollout_copies()
    saved_threads = payload.get("threads")
    if tr.threads is not None and saved_threads and tr.threads.get("how") in ("measured", "two cores: one thread"):
        # a resumed run goes on with the counts its run measured (the same rounding as before)
        threads.apply(saved_threads)
        tr.threads = {**saved_threads, "how": "restored from the checkpoint"}
    saved_world = payload.get("world_size", 1)
    if restore_env and saved_world != tr.world_size:
        warnings.warn(f"checkpoint written by {saved_world} rank(s), resumed by {tr.world_size}: policies, "
                      f"optimisers and counters are restored; env replicas start new episodes",
                      WorkbenchWarning, stacklevel=3)
    elif restore_env and own is not None and own["env_state"]["obs"].shape == tr.env.store["obs"].shape:
        tr.env.store.load_snapshot(own["env_state"])
        tr.env.seed = own["env_seed"]
        for n, saved in own.get("reward_returns", {}).items():  # (the returns of the episodes restored with it)
            if n in tr.reward_scales:
                tr.reward_scales[n].returns.copy_(saved)
        if not _set_generator(tr.env._generator, payload["rng"]["env_generator"]):
            # not the env's first stream again: its resets would repeat the run's first episodes
            tr.env._generator.manual_seed(tr.env.seed * 2**20 + tr.iteration)


def _set_generator(generator: torch.Generator, state: torch.Tensor) -> bool:
    """Load a generator's saved state when it is of this generator's kind (a CUDA generator's state
    is its seed and offset, a CPU generator's its Mersenne Twister); False when it is not."""
    if state.numel() != generator.get_state().numel():
        return False
    generator.set_state(state)
    return True


def _learning_rates(tr) -> list:
    """[(optimiser, its learning rates now)] of every optimiser of `tr`."""
    return [(o, o.lr.clone() if isinstance(o, MemberAdam) else [float(g["lr"]) for g in o.param_groups])
            for o in _optimizers(tr)]


def _set_learning_rates(rates: list) -> None:
    """Put back the learning rates `_learning_rates` read (in the tensors a graph reads, in place)."""
    for o, lr in rates:
        if isinstance(o, MemberAdam):
            o.lr.copy_(lr)
            continue
        for group, value in zip(o.param_groups, lr):
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(value)
            else:
                group["lr"] = value


def _keep_lr_tensors(tr):
    """A loaded optimiser state brings its own learning-rate values: copy them into the device tensors
    the fused Adam (and a captured graph) read, and keep those tensors in place."""
    if not tr.lr_tensors:
        return
    tensors = iter(tr.lr_tensors)
    for o in _optimizers(tr):
        if isinstance(o, MemberAdam):  # (its learning rates are its own tensor, loaded in place)
            next(tensors)
            continue
        for group in o.param_groups:
            tensor, _base = next(tensors)
            tensor.fill_(float(group["lr"]))
            group["lr"] = tensor
