"""A trainer or env its user drops frees its arrays at once, not at the garbage collector's next full
pass: no reference cycle runs through them. A notebook that makes a new trainer after an old one
gets the old one's (device) memory back when the name is rebound."""
import contextlib
import gc
import weakref

import pytest
import torch

import workbench as wb
from workbench.learn import config as cfg
from workbench.learn import runs
from workbench.learn.trainer import make_trainer

from conftest import gpu_only

CONFIGS = {
    "ppo-cartpole": dict(env="cartpole", num_envs=16, rollout_length=8),
    "a2c-tag-shared-body": dict(env="tag_continuous", algorithm="a2c", num_envs=2, rollout_length=4,
                                hidden_sizes=[16, 16], shared_body=True,
                                env_params=dict(num_taggers=2, num_runners=3, num_other_agents_observed=2)),
    "ddpg-pendulum": dict(env="pendulum", algorithm="ddpg", num_envs=8),
    "ppo-population": dict(env="cartpole", num_envs=16, rollout_length=8, seeds=2, sweep={"lr": [1e-3, 3e-4]}),
}


@contextlib.contextmanager
def collector_off():
    """The garbage collector paused: what `del` frees is what reference counting frees."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _trained(config: dict, target: str):
    config = cfg.from_dict({"target": target, "progress": False, "cpu_threads": 1, **config})
    trainer = make_trainer(config)
    trainer.env.record([0])
    trainer.train(num_iterations=2)
    return trainer


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_dropped_trainer_is_freed_by_del(name):
    _trained(CONFIGS[name], "cpu")  # (a first trainer imports what its constructor imports lazily)
    with collector_off():
        trainer = _trained(CONFIGS[name], "cpu")
        refs = {"trainer": weakref.ref(trainer), "env": weakref.ref(trainer.env),
                "collector": weakref.ref(trainer.collector),
                "a rollout or replay array": weakref.ref(next(iter(trainer.buffers.values())).rewards
                                                         if trainer.algorithm != "ddpg" else trainer.env.store["obs"])}
        del trainer
        alive = sorted(k for k, ref in refs.items() if ref() is not None)
    assert not alive, f"alive after del (held by a reference cycle): {alive}"


def test_a_dropped_env_with_a_recording_is_freed_by_del(target):
    with collector_off():
        env = wb.make("cartpole", num_envs=4, target=target, seed=1)
        recorder = env.record([0, 2])
        env.random_steps(40)
        refs = [weakref.ref(env), weakref.ref(env.store["obs"])]
        del env
        assert [ref() is None for ref in refs] == [True, False]  # the recording still holds the store
        assert len(recorder.pull()) == 2  # and still reads it
        del recorder
        assert refs[1]() is None


@gpu_only
@pytest.mark.parametrize("name", ["cartpole", "tag_continuous"])
def test_a_dropped_gpu_trainer_returns_its_device_memory(name):
    """The shipped config on the default target (graphs, fused kernels): after `del`, without a garbage
    collection, device memory is what it was after an earlier trainer was dropped (what stays is
    cuBLAS's per-stream workspaces, made once per process: a new trainer makes none)."""
    config = cfg.replace(cfg.load_yaml(runs.resolve_config(name)), num_envs=256, progress=False)

    def train_and_drop():
        trainer = make_trainer(config)
        trainer.train(num_iterations=3)
        torch.cuda.synchronize()
        held = torch.cuda.memory_allocated()
        del trainer
        return held

    with collector_off():
        train_and_drop()
        before = torch.cuda.memory_allocated()
        held = train_and_drop() - before
        left = torch.cuda.memory_allocated() - before
    assert held > 0 and left <= 1 << 20, f"{left / 2**20:.1f} MiB of {held / 2**20:.1f} MiB still held after del"
