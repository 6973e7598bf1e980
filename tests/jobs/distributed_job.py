"""Jobs launched by tests/test_distributed.py under torchrun (2 processes; gloo on the cpu target, the
population job also NCCL on 2 GPUs)."""
import contextlib
import copy
import os
import sys

import torch
import torch.distributed as dist

import workbench as wb
from workbench.learn import distributed as wbd
from workbench.learn.algorithms import a2c, ppo
from workbench.compiler.envdef import Discrete
from workbench.learn.policies import ActionHead, ActorCritic
from workbench.learn.rollout import Batch


def gathered_params(model):
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    out = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(out, flat)
    return out


def equal_batch():
    """Two ranks on halves of a batch == one process on the whole batch."""
    context = wbd.init("cpu")
    sync = wbd.GradientSync(context)
    torch.manual_seed(0)
    B, O = 64, 4
    # rank 1 has far fewer agents in the game than rank 0: the global means must weigh every live
    # sample alike, whichever rank holds it
    mask = (torch.arange(B) < B // 2 + B // 8).float()
    full = {"obs": torch.randn(B, O), "actions": torch.randint(0, 2, (B,)), "logp_old": torch.full((B,), -0.69),
            "values": torch.randn(B), "advantages": torch.randn(B), "returns": torch.randn(B), "mask": mask}
    half = Batch({k: v.chunk(context.world_size)[context.rank] for k, v in full.items()})
    full = Batch(full)
    for name, algorithm, config in (
            ("a2c", a2c, wb.A2CConfig(normalize_advantages=False, max_grad_norm=0.5)),
            ("a2c-norm", a2c, wb.A2CConfig(normalize_advantages=True, max_grad_norm=0.5)),
            ("ppo", ppo, wb.PPOConfig(num_minibatches=1, update_epochs=1, normalize_advantages=False)),
            ("ppo-norm", ppo, wb.PPOConfig(num_minibatches=1, update_epochs=1, normalize_advantages=True))):
        torch.manual_seed(1)
        model = ActorCritic(O, Discrete(2))
        model.head = ActionHead(Discrete(2))
        single = copy.deepcopy(model)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        opt_single = torch.optim.Adam(single.parameters(), lr=1e-2)
        for _ in range(3):
            for m, o, batch, s in ((model, opt, half, sync), (single, opt_single, full, None)):
                stats = {k: torch.zeros(()) for k in algorithm.STATS}
                algorithm.update(m, o, batch, config, sync=s, chunk_size=B, stats=stats,
                                 generator=torch.Generator().manual_seed(2), autocast=contextlib.nullcontext)
        params = gathered_params(model)
        assert all(torch.equal(params[0], p) for p in params), f"{name}: ranks diverged"
        reference = torch.cat([p.detach().reshape(-1) for p in single.parameters()])
        err = float((params[0] - reference).abs().max())
        assert err < 1e-5, f"{name}: data-parallel differs from single-process by {err}"
        print(f"rank {context.rank} {name} ok {err:.2e}", flush=True)


def train(run_dir, die_at=None):
    """A short data-parallel PPO run; ranks must end with identical parameters."""
    config = wb.PPOConfig(num_envs=8, rollout_length=16, num_minibatches=2, total_env_steps=8 * 16 * 2 * 4,
                          target="cpu", log_every=1, run_dir=run_dir, normalize_obs=True, normalize_reward=True)
    trainer = wb.make_trainer(config)
    rank = trainer.rank

    def callback(iteration, metrics):
        if die_at is not None and rank == 1 and iteration == die_at:
            os._exit(3)
        return True

    result = trainer.train(callback=callback)
    for name, model in trainer.models.items():
        params = gathered_params(model)
        assert all(torch.equal(params[0], p) for p in params), f"policy {name}: ranks diverged"
    for name, norm in trainer.norms.items():
        stats = gathered_params(torch.nn.ParameterList([norm.mean, norm.var]))
        assert all(torch.equal(stats[0], s) for s in stats), f"normaliser {name}: ranks diverged"
    for name, scale in trainer.reward_scales.items():
        stats = gathered_params(torch.nn.ParameterList([scale.stats.mean, scale.stats.var]))
        assert all(torch.equal(stats[0], s) for s in stats), f"reward scale {name}: ranks diverged"
        returns = gathered_params(torch.nn.ParameterList([scale.returns]))
        assert not torch.equal(returns[0], returns[1]), f"reward scale {name}: ranks share running returns"
    seeds = [torch.zeros(1, dtype=torch.long) for _ in range(trainer.world_size)]
    dist.all_gather(seeds, torch.tensor([trainer.env.seed]))
    assert len({int(s) for s in seeds}) == trainer.world_size, "ranks share an env seed"
    noise = [torch.zeros(1, dtype=torch.long) for _ in range(trainer.world_size)]
    dist.all_gather(noise, torch.tensor([trainer.generator.initial_seed()]))
    assert len({int(s) for s in noise}) == trainer.world_size, "ranks draw the same policy noise"
    print(f"rank {rank} trained {result.iterations} iterations, env_steps {result.env_steps}", flush=True)
    if die_at is None:
        dist.barrier()  # rank 0 has written the checkpoint
        resumed = wb.make_trainer(config).load(f"{run_dir}/checkpoint.pt")
        draws = [torch.zeros(4) for _ in range(trainer.world_size)]
        dist.all_gather(draws, torch.rand(4, generator=resumed.generator))
        assert not torch.equal(draws[0], draws[1]), "resumed ranks draw the same policy noise"
        print(f"rank {rank} resumed with its own policy noise", flush=True)
        resumed.train(num_iterations=1)  # past the budget with anneal_lr: each rank would warn


def resume_exact(run_dir):
    """A data-parallel run stopped after 2 iterations and resumed for 2 more on the same ranks ends
    where the same run trained 4 iterations without a stop does (PPO, and DDPG with its replay), and
    so does a population split over the ranks."""
    cases = {
        "ppo": lambda steps: wb.PPOConfig(num_envs=8, rollout_length=16, num_minibatches=2, total_env_steps=steps,
                                          target="cpu", normalize_obs=True, normalize_reward=True, cpu_threads=1),
        "ddpg": lambda steps: wb.DDPGConfig(env="pendulum", num_envs=4, rollout_length=8, total_env_steps=steps,
                                            target="cpu", learning_starts=32, batch_size=32, cpu_threads=1),
        "population": lambda steps: population_config(total_env_steps=steps),
    }
    for name, config_for in cases.items():
        per_iteration = {"ppo": 8 * 16 * 2, "ddpg": 4 * 8 * 2, "population": 8 * 16}[name]
        straight = wb.make_trainer(config_for(4 * per_iteration))
        straight.train()
        rank = dist.get_rank()
        first = wb.make_trainer(config_for(4 * per_iteration))
        first.train(num_iterations=2)  # (as a run stopped there: the same annealing)
        path = os.path.join(run_dir, f"{name}.pt")
        first.save(path)
        dist.barrier()  # rank 0 has written it
        resumed = wb.make_trainer(config_for(4 * per_iteration)).load(path)
        resumed.train()
        worst = 0.0
        for policy, model in straight.models.items():
            for a, b in zip(model.parameters(), resumed.models[policy].parameters()):
                worst = max(worst, float((a.detach() - b.detach()).abs().max()))
        print(f"rank {rank} {name} resumed differs by {worst:.3g} at iteration {resumed.iteration}", flush=True)


# the population job's settings per target (fp32 on GPUs: both sides of the comparison compute alike)
TARGETS = {"cpu": {}, "cuda": {"target": "cuda", "precision": "fp32"}}


def population_config(run_dir=None, **changes):
    """4 members (2 seeds x 2 learning rates) of CartPole PPO; split over 2 ranks, 2 members each."""
    settings = dict(env="cartpole", num_envs=8, rollout_length=16, num_minibatches=2, update_epochs=2, target="cpu",
                    seeds=2, sweep={"lr": [1e-3, 3e-3]}, cpu_threads=1, log_every=1, total_env_steps=8 * 16 * 3,
                    normalize_reward=True, run_dir=run_dir)
    return wb.PPOConfig(**{**settings, **changes})


def population(run_dir, target="cpu"):
    """A population split over the ranks: each trains its members, every rank sees every member's
    report, rank 0's checkpoint holds every member, and every rank resumes its own from it."""
    import json
    import time
    from workbench.learn import checkpoint, runs
    if os.environ["RANK"] == "0":  # a slow disk: rank 1 must not look for the checkpoint before it is written
        save_atomic = checkpoint.save_atomic
        checkpoint.save_atomic = lambda *args, **kwargs: time.sleep(3) or save_atomic(*args, **kwargs)
    trainer, result = runs.run_training(population_config(run_dir, **TARGETS[target]), progress=False,
                                        show_run_folder=False)
    rank = dist.get_rank()
    print(f"rank {rank} trains members {[m.index for m in trainer.members]}", flush=True)
    print(f"rank {rank} reports members {[m['member'] for m in result.metrics['members']]}", flush=True)
    if rank == 0:
        with open(os.path.join(run_dir, "split_history.json"), "w") as fh:
            json.dump(trainer.history, fh)
    resumed = wb.make_trainer(population_config(None, total_env_steps=8 * 16 * 4, **TARGETS[target]))
    resumed.load(os.path.join(run_dir, "checkpoint.pt"))
    before = [p.detach().cpu() for p in resumed.models["shared"].parameters()]
    weights = torch.load(os.path.join(run_dir, "checkpoint.pt"), map_location="cpu",
                         weights_only=False)["models"]["shared"]
    start = resumed.members[0].index
    mine = all(torch.equal(p, weights[name][start:start + resumed.M])
               for p, (name, _) in zip(before, resumed.models["shared"].named_parameters()))
    resumed.train(num_iterations=1)
    print(f"rank {rank} resumed its members {mine} at iteration {resumed.iteration}", flush=True)


def uneven():
    """Ranks given different num_envs: refused by name before anything compiles (before: each rank
    counted another number of iterations, and their collectives hung until gloo's timeout)."""
    rank = int(os.environ["RANK"])
    config = wb.PPOConfig(env="cartpole", num_envs=8 if rank == 0 else 24, target="cpu", rollout_length=8)
    try:
        wb.make_trainer(config)
    except wb.WorkbenchError as exc:
        print(f"rank {rank} refused: {exc}", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "uneven":
        uneven()
    if mode == "equal_batch":
        equal_batch()
    elif mode == "train":
        train(sys.argv[2])
    elif mode == "die":
        train(sys.argv[2], die_at=2)
    elif mode == "resume_exact":
        resume_exact(sys.argv[2])
    elif mode == "population":
        population(*sys.argv[2:4])
    dist.barrier()  # no rank tears gloo down while the other still talks to it (an abort at exit otherwise)
    dist.destroy_process_group()
    # no C++ destructors at interpreter exit: one of gloo's threads, still joinable then, aborted a rank
    # now and then ("terminate called without an active exception") after every check had passed
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
