"""The learner on a GPU: graph-vs-eager parity, throughput and peak memory of Tag training.

    python bench/bench_learner.py parity                 # PPO, A2C (Tag, masks, MAPPO), DDPG: graph == eager
    python bench/bench_learner.py tag 100:250 1000:100   # WarpDrive's shipped Tag A2C config, replicas:T
    python bench/bench_learner.py big 2000:20            # Tag continuous, 1000 agents per replica
    ... tag|big --shared-body --activation relu          # WarpDrive's network: one ReLU body, policy and value

parity trains the same seed with the whole iteration replayed from a CUDA graph and eagerly and
prints the largest difference of the logged metrics (the same kernels run in both). tag and big
time iterations after a warm-up (eager first iteration, capture), synchronising the device, and
report the median and torch.cuda.max_memory_allocated.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import time

import torch

import _common  # noqa: F401  (puts the checkout on sys.path)
from _common import iteration_seconds
import workbench as wb

WARPDRIVE_TAG = dict(num_taggers=10, num_runners=100, grid_length=20.0, episode_length=500, max_acceleration=0.1,
                     min_acceleration=-0.1, max_turn=2.356, min_turn=-2.356, num_acceleration_levels=20,
                     num_turn_levels=20, num_other_agents_observed=10, tagging_distance=0.02,
                     tag_reward_for_tagger=10.0, tag_penalty_for_runner=-10.0, step_penalty_for_tagger=0.0,
                     step_reward_for_runner=0.0, edge_hit_penalty=0.0, end_of_game_reward_for_runner=1.0,
                     runner_exits_game_after_tagged=1)
SMALL_TAG = dict(num_taggers=2, num_runners=6, grid_length=10.0, episode_length=40, num_other_agents_observed=3)


COMPILE = True
LEARNER_MEMORY_GB = 2.0  # --learner-memory-gb: the config's bound on a learner chunk's activations
ACTIVATION = None  # --activation relu: WarpDrive's hidden activation (default: tanh, or relu with --shared-body)
SHARED_BODY = False  # --shared-body: WarpDrive's fully connected model (one 256 x 256 body, policy and value heads)
TARGET = "auto"  # the default settings' target (cuda-c for Tag where NVRTC loads); --target to pick one


def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


def parity():
    cases = [
        ("ppo cartpole", wb.PPOConfig(env="cartpole", num_envs=1024, rollout_length=32, log_every=1,
                                      total_env_steps=10**9)),
        ("a2c tag (masks)", wb.A2CConfig(env="tag_continuous", env_params=SMALL_TAG, num_envs=256, rollout_length=16,
                                         log_every=1, total_env_steps=10**9)),
        ("a2c tag shared body", wb.A2CConfig(env="tag_continuous", env_params=SMALL_TAG, num_envs=256,
                                             rollout_length=16, log_every=1, total_env_steps=10**9, shared_body=True)),
        ("ppo tag mappo", wb.PPOConfig(env="tag_continuous", env_params=SMALL_TAG, num_envs=256, rollout_length=16,
                                       log_every=1, total_env_steps=10**9, centralised_critic=("runners",))),
        ("ppo pendulum gaussian", wb.PPOConfig(env="pendulum", num_envs=512, rollout_length=32, log_every=1,
                                               total_env_steps=10**9, normalize_obs=True)),
        ("ddpg pendulum", wb.DDPGConfig(env="pendulum", num_envs=64, rollout_length=4, learning_starts=512,
                                        log_every=1, total_env_steps=10**9, normalize_obs=True)),
    ]
    for name, config in cases:
        histories, states = [], []
        for graph in (True, False):
            trainer = wb.make_trainer(wb.config.replace(config, cuda_graph=graph, target="cuda"))
            trainer.train(num_iterations=6)
            histories.append(trainer.history)
            states.append(trainer.graph.state)
        worst = 0.0
        for a, b in zip(*histories):
            for k, v in a.items():
                if k in ("env_steps_per_s", "time_s") or not isinstance(v, float) or math.isnan(v):
                    continue
                worst = max(worst, abs(v - b[k]) / max(abs(b[k]), 1e-6))
        result(task="parity", case=name, graph_state=states[0], eager_state=states[1], max_rel_diff=worst,
               last=histories[0][-1].get("mean_return"))


def timed_training(config, iterations=4):
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    trainer = wb.make_trainer(config)
    trainer.train(num_iterations=2)
    torch.cuda.synchronize()
    setup = time.perf_counter() - start
    median = iteration_seconds(trainer, repeats=iterations, warmup=0)
    row = dict(setup_s=round(setup, 1), iteration_s=round(median, 4),
               env_steps_per_s=round(trainer.steps_per_iteration / median),
               agent_steps_per_s=round(trainer.steps_per_iteration * trainer.env.num_agents / median),
               peak_gb=round(torch.cuda.max_memory_allocated() / 2**30, 2), graph=trainer.graph.state,
               precision=trainer.precision, chunks={k: v for k, v in trainer.chunk_size.items()})
    del trainer
    gc.collect()  # (what a timed trainer left, before the next size measures its peak)
    torch.cuda.empty_cache()
    return row


def tag(specs, precisions, algo="a2c"):
    for spec in specs:
        n, T = (int(x) for x in spec.split(":"))
        for precision in precisions:
            Cfg = wb.A2CConfig if algo == "a2c" else wb.PPOConfig
            extra = {} if algo == "a2c" else dict(update_epochs=1, num_minibatches=1)
            config = Cfg(env="tag_continuous", env_params=WARPDRIVE_TAG, num_envs=n, rollout_length=T, target=TARGET,
                         hidden_sizes=(256, 256), lr=1e-3, gamma=0.98, log_every=10**9, total_env_steps=10**15,
                         precision=precision, compile=COMPILE, shared_body=SHARED_BODY, activation=ACTIVATION,
                         learner_memory_gb=LEARNER_MEMORY_GB, **extra)
            try:
                result(task="tag_train", algo=algo, num_envs=n, T=T, compile=COMPILE, shared_body=SHARED_BODY,
                       activation=ACTIVATION or "tanh", **timed_training(config))
            except Exception as exc:  # noqa: BLE001 - report and go on to the next size
                result(task="tag_train", num_envs=n, T=T, precision=precision, error=repr(exc)[:300])


def big(specs, precisions):
    for spec in specs:
        n, T = (int(x) for x in spec.split(":"))
        for precision in precisions:
            config = wb.A2CConfig(env="tag_continuous", num_envs=n, rollout_length=T, target=TARGET,
                                  env_params=dict(WARPDRIVE_TAG, num_taggers=50, num_runners=950),
                                  hidden_sizes=(256, 256), log_every=10**9, total_env_steps=10**15, precision=precision,
                                  compile=COMPILE, shared_body=SHARED_BODY, activation=ACTIVATION,
                                  learner_memory_gb=LEARNER_MEMORY_GB)
            try:
                result(task="tag_big", agents=1000, num_envs=n, T=T, shared_body=SHARED_BODY,
                       activation=ACTIVATION or "tanh",
                       **timed_training(config, iterations=3))
            except Exception as exc:  # noqa: BLE001
                result(task="tag_big", num_envs=n, T=T, precision=precision, error=repr(exc)[:300])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["parity", "tag", "big"])
    parser.add_argument("specs", nargs="*", default=[])
    parser.add_argument("--precisions", nargs="*", default=["auto"])
    parser.add_argument("--algo", default="a2c")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--target", default="auto", help="Tag's target (default: auto, as the default settings)")
    parser.add_argument("--shared-body", action="store_true", help="one MLP body for policy and value (WarpDrive's)")
    parser.add_argument("--learner-memory-gb", type=float, default=2.0)
    parser.add_argument("--activation", choices=["tanh", "relu"], default=None)
    args = parser.parse_args()
    global COMPILE, TARGET, SHARED_BODY, LEARNER_MEMORY_GB, ACTIVATION
    ACTIVATION = args.activation
    LEARNER_MEMORY_GB = args.learner_memory_gb
    COMPILE = not args.no_compile
    SHARED_BODY = args.shared_body
    TARGET = args.target
    if args.what == "parity":
        parity()
    elif args.what == "tag":
        tag(args.specs or ["100:250", "1000:100"], args.precisions, args.algo)
    else:
        big(args.specs or ["2000:20"], args.precisions)


if __name__ == "__main__":
    main()
