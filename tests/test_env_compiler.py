"""The env compiler: its on-disk cache, source checks at parse time, condensed compiler errors,
bounds-checked debug kernels and the random key of every phase (issue 13's problems, each reproduced)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import workbench as wb
from workbench import vocabulary
from workbench.helpers import clip, rint, round_half_even, sign

# A per-replica counter env: one agent per replica draws in its step phase and in observe.
KEYS = textwrap.dedent('''
    from workbench.envdef import Box, Discrete, per_env
    from workbench.rng import uniform
    NUM_AGENTS = 1
    MAX_STEPS = 50
    OBSERVATION = Box(shape=(1,))
    ACTION = Discrete(2)
    STATE = dict(drawn=per_env())

    def reset(env, agent, drawn):
        drawn[env] = 0.0

    def step(env, agent, key, drawn):
        drawn[env] = uniform(key, 0)

    def observe(env, agent, key, obs):
        obs[env, agent, 0] = uniform(key, 0)
''')


def test_observe_draws_from_its_own_key_stream(target):
    wb.register("observe_keys", KEYS)
    env = wb.make("observe_keys", num_envs=4 if target == "cuda" else 64, target=target)
    obs_before = env.reset().clone()
    env.step()
    # observe after reset and the first step's phase ran at the same t: they must not share draws
    assert not torch.equal(obs_before[:, 0, 0], env.data["drawn"])
    obs_after, _, _, _ = env.step()
    assert not torch.equal(obs_after[:, 0, 0], env.data["drawn"])
