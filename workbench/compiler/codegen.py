"""Generates the reset and step drivers that run an env's phases on a target.

Both numba targets share one driver text; they differ only in how a replica and its agents
map onto loops or threads (the `header`) and in what a barrier is (`sync`). The driver owns
the framework's part of a step: clearing rewards and flags, the time-limit truncation,
episode bookkeeping and the same-step auto-reset of finished replicas with the final
observation kept (where KEEP_FINAL says) and, for replicas the recorder marks, the state they
ended in (terminal_arrays). A phase runs over the agents of a replica, over the instances of one of its
ENTITIES (strided over the same lanes), or once per replica (its first lane); a barrier follows
every phase whatever it runs over.

Episode bookkeeping: `last_return` [E, A] is each replica's return so far, this step's reward included:
where `done`, the return of the episode that just ended (a replica done at the last step starts its
count anew); `last_length` [E] is the length of the last finished episode. Both are read where done
(episode statistics). The return is written every step, densely, instead of kept in a second array
and copied where an episode ends: a scattered 4-byte store costs about a dense array's worth
(CartPole at 10M replicas on an H100: 336 -> 328 us a step), and not for its partial sectors: whole
lines stored by every warp with an ending replica cost as much (docs/benchmarks.md). The length is
stored where an episode ends: densely it would cost long episodes more than it saves short ones
(Pendulum at 10M: 363 -> 400 us; CartPole's random episodes: -7).

Random numbers: a phase's key is `make_key(seed + e // span, e % span, a, episode, step)`, so a
block of `span` replicas draws exactly what a separate env of `span` replicas seeded `seed + k`
draws (block k); `span` is the number of replicas (one block) unless the env splits them.
"""
from __future__ import annotations

from dataclasses import dataclass

from .envdef import FINAL_ACTIVE, Discrete, EnvDefinition, MultiDiscrete

# {stream}: the agent slot of the key (stream_of); _wb_seed, _wb_e: the replica's seed and index in its block
RESET_KEY = "make_key(_wb_seed, _wb_e, {stream}, episode[e] + 1, RESET_STEP)"
OBSERVE_KEY = "make_key(_wb_seed, _wb_e, {stream}, episode[e], _wb_np.uint64(t[e]) + OBSERVE_STEP)"
# the step driver's keys come from the replica's clock as read at its start (_wb_t, _wb_ep), not from reloads
STEP_KEY = "make_key(_wb_seed, _wb_e, {stream}, _wb_ep, _wb_t)"
FINAL_OBSERVE_KEY = "make_key(_wb_seed, _wb_e, {stream}, _wb_ep, _wb_np.uint64(_wb_t + 1) + OBSERVE_STEP)"
STEP_RESET_KEY = "make_key(_wb_seed, _wb_e, {stream}, _wb_ep + 1, RESET_STEP)"
NEXT_OBSERVE_KEY = "make_key(_wb_seed, _wb_e, {stream}, _wb_next_ep, _wb_np.uint64(_wb_next_t) + OBSERVE_STEP)"


@dataclass(frozen=True)
class Layout:
    """How replicas and agents map to threads: `threads_per_env` lanes share one replica
    (agents strided over them), `envs_per_block` replicas share one block."""
    threads_per_env: int
    envs_per_block: int

    @property
    def block(self) -> int:
        return self.threads_per_env * self.envs_per_block


def gpu_layout(num_agents: int, block_size: int = 128, max_threads_per_env: int = 256,
               multi_agent_block: int = 128) -> Layout:
    """One replica per group of lanes; single-agent envs pack one replica per thread (blocks of
    `block_size`: at 10M replicas on an H100, CartPole's cuda-c step takes 310 us in blocks of 128
    against 321 in blocks of 256, Acrobot's 1000 against 1142, MountainCar's 245 against 264; equal
    within 4% from 10k replicas up to 1M). At most 256 lanes per replica, agents strided over them: a block of 256
    threads launches whatever the kernel's register count (<= 255 each), which 1024 threads do
    not. Multi-agent blocks hold `multi_agent_block` lanes (one replica from 128 lanes up): a
    phase's barrier then holds back only the replicas of one small block (Tag continuous with 110
    agents, an H100: 74.6 -> 65.6 us a step at 100 replicas, 218 -> 210 us at 1000, against
    two replicas a block)."""
    if num_agents == 1:
        return Layout(1, block_size)
    tpe = 1
    while tpe < num_agents and tpe < max_threads_per_env:
        tpe *= 2
    tpe = max(tpe, 32)
    return Layout(tpe, max(1, multi_agent_block // tpe))


SLOT = "_wb_slot"


def terminal_arrays(defn: EnvDefinition) -> list:
    """(kernel argument, state array) of each copy the step driver makes of a recorded replica's
    state when its episode ends: `_wb_final_NAME` [S, *NAME's shape after E] keeps, in row
    `_wb_slot[e] - 1`, NAME as the step phases left it, before observe and the auto-reset; replicas
    whose `_wb_slot[e]` is 0 (every replica unless the recorder marks it) are never copied.
    `_wb_slot[n_envs]` is 1 while any replica is recorded, `_wb_slot[n_envs + 1]` while final
    observations are kept at every episode end (recorder.TerminalCopies; KEEP_FINAL)."""
    return [(f"_wb_final_{name}", spec) for name, spec in defn.arrays.items() if spec.owner == "env"]


# where a replica's episode ends, its final observation is observed into final_obs only if the episode
# was truncated (a learner bootstraps from it), a replica is recorded, or every end is asked for
KEEP_FINAL = f"_wb_truncated or {SLOT}[n_envs] != 0 or {SLOT}[n_envs + 1] != 0"


# draw: 1 when the step draws every agent's action itself (Env.random_steps; drawn_actions), else 0
SCALAR_ARGS = ("n_envs", "seed", "span", "draw")


def kernel_args(defn: EnvDefinition) -> list:
    """The drivers' arguments: the scalars (SCALAR_ARGS; `span`: replicas per seed, see the module
    docstring), the store's arrays in definition order, then the recorder's slot array and
    terminal copies (terminal_arrays)."""
    return list(SCALAR_ARGS) + list(defn.arrays) + [SLOT] + [arg for arg, _ in terminal_arrays(defn)]


ENTITY_STREAM = 1 << 32  # entity k's instance i draws from the key of "agent" (k + 1) * ENTITY_STREAM + i
ACTION_STREAM = 1 << 62  # a step that draws its actions: agent a's come from the key of "agent" ACTION_STREAM + a


def drawn_actions(defn: EnvDefinition) -> list:
    """(index suffix after the agent, categories) of each action entry that a step with `draw` set draws
    uniformly (Discrete: one, MultiDiscrete: one per head; Box actions are drawn by the caller): entry
    h of agent a is randint(make_key(seed, replica, ACTION_STREAM + a, episode, t), h, categories)."""
    if isinstance(defn.action, Discrete):
        return [("", defn.action.n)]
    if isinstance(defn.action, MultiDiscrete):
        return [(f", {h}", n) for h, n in enumerate(defn.action.nvec)]
    return []


def _draw_actions(w, defn: EnvDefinition, d: int):
    """Where `draw` is set, every agent's action drawn before the step's phases (drawn_actions)."""
    entries = drawn_actions(defn)
    if entries:
        key = f"_wb_akey = make_key(_wb_seed, _wb_e, {ACTION_STREAM} + a, _wb_ep, _wb_t)"
        w.agent_loop(d, (key,) + tuple(f"action[e, a{suffix}] = randint(_wb_akey, {h}, {n})"
                                       for h, (suffix, n) in enumerate(entries)), guard="active and draw != 0")


def stream_of(defn: EnvDefinition, index: str | None) -> str:
    """The agent slot of a phase's random key: the agent `a`; for an entity phase a stream apart
    from every agent's (agents are fewer than 2**32); for a per-replica phase 0 (agent 0's)."""
    if index == "agent":
        return "a"
    if index is None:
        return "0"
    return f"{(list(defn.entities).index(index) + 1) * ENTITY_STREAM} + a"


def _call(fn, key_expr: str, defn: EnvDefinition, rename: dict | None = None) -> tuple:
    index = defn.phase_index(fn)
    names = {"env": "e", "key": "key", **(rename or {})}
    if index is not None:
        names[index] = "a"
    args = [names.get(p, p) for p in fn.__code__.co_varnames[:fn.__code__.co_argcount]]
    lines = []
    if "key" in args:
        lines.append("key = " + key_expr.format(stream=stream_of(defn, index)))
    lines.append(f"{fn.__name__}({', '.join(args)})")
    return tuple(lines)


class _Writer:
    def __init__(self, sync: str, one_agent_a_lane: bool = False):
        self.lines: list = []
        self.sync = sync
        self.one_agent_a_lane = one_agent_a_lane

    def emit(self, depth: int, *lines: str):
        self.lines.extend("    " * depth + line for line in lines)

    def barrier(self, depth: int):
        if self.sync:
            self.emit(depth, self.sync)

    def agent_loop(self, depth: int, body: tuple, guard: str = "active", count: str = "NUM_AGENTS"):
        self.emit(depth, f"if {guard}:", "    a = lane", f"    while a < {count}:")
        self.emit(depth + 2, *body, "a += TPE")

    def phase(self, depth: int, defn: EnvDefinition, fn, key_expr: str, guard: str = "active",
              rename: dict | None = None):
        """One phase over what it runs on: the agents, an entity's instances (strided over the
        replica's lanes as agents are), or the replica once (its first lane); `rename` binds a
        parameter to another array (the final observation: obs -> final_obs)."""
        index = defn.phase_index(fn)
        body = _call(fn, key_expr, defn, rename)
        if index is None:
            self.emit(depth, f"if {guard} and lane == 0:")
            self.emit(depth + 1, *body)
        else:
            self.agent_loop(depth, body, guard, "NUM_AGENTS" if index == "agent" else str(defn.entities[index]))


def next_observe_phases(defn: EnvDefinition) -> list:
    """The observe phases that write the observation after a step or reset: none where the observation
    is the state (envdef.observed_state; the final observation is still observed into final_obs)."""
    return [] if defn.obs_state else list(defn.observe_phases)


def _copy(dst: str, dst_lead: str, src: str, src_lead: str, shape: tuple) -> tuple:
    lines = [("    " * k) + f"for i{k} in range({n}):" for k, n in enumerate(shape)]
    sub = "".join(f", i{k}" for k in range(len(shape)))
    return tuple(lines) + ("    " * len(shape) + f"{dst}[{dst_lead}{sub}] = {src}[{src_lead}{sub}]",)


def _copy_terminal(w: _Writer, defn: EnvDefinition, d: int):
    """Recorded replicas whose episode ends in this step keep their state (terminal_arrays). It runs
    between the step phases' barrier and the next, where no phase writes state; `_wb_t`, read before
    `t` advances, tells a time limit; observe phases may still rewrite scratch state after it."""
    # a replica's slot is read only where an episode ends and someone records: otherwise no extra bytes move
    ending = f"_wb_done and {SLOT}[n_envs] != 0 and {SLOT}[e] != 0"
    agent_copies, env_copies = (), ()
    for arg, spec in terminal_arrays(defn):
        if spec.layout == "agent":
            agent_copies += _copy(arg, "_wb_s, a", spec.name, "e, a", spec.shape)
        else:
            env_copies += _copy(arg, "_wb_s", spec.name, "e", spec.shape)
    if agent_copies:
        w.agent_loop(d, (f"_wb_s = {SLOT}[e] - 1",) + agent_copies, guard=ending)
    if env_copies:
        w.emit(d, f"if {ending} and lane == 0:", f"    _wb_s = {SLOT}[e] - 1")
        w.emit(d + 1, *env_copies)


def _keep_final_active(w: _Writer, defn: EnvDefinition, d: int):
    """Where the episode ends, each agent's ACTIVE flag before the auto-reset into final_active
    (envdef.FINAL_ACTIVE): A bytes for a replica that ends, none for one that runs on."""
    if defn.active is not None:
        w.agent_loop(d, (f"{FINAL_ACTIVE}[e, a] = 1 if {defn.active}[e, a] != 0 else 0",), guard="_wb_done")


def clock_seen_after_step(defn: EnvDefinition) -> bool:
    """Whether a final observe or reset phase takes `t`: the one-agent step then stores the clock one
    past the step before them (otherwise only once, after them)."""
    return any("t" in fn.__code__.co_varnames[:fn.__code__.co_argcount]
               for fn in list(defn.observe_phases) + list(defn.reset_phases))


def _one_agent_step_body(w: _Writer, defn: EnvDefinition, d: int):
    """_step_body for a single-agent env: no barriers, so the path of a replica whose episode ended is
    one branch, and the return and clock are written once (codegen_c._one_lane_step_body)."""
    w.emit(d, "if active:")
    d += 1
    w.emit(d, "_wb_t = t[e]", "_wb_ep = episode[e]",
           "_wb_last_return = last_return[e, 0]  # loaded whatever done says: one round trip, not two",
           "_wb_return0 = _wb_np.float32(0) if done[e] != 0 else _wb_last_return  # done at the last step: anew",
           "reward[e, 0] = 0",
           "terminated[e] = 0", "truncated[e] = 0")
    _draw_actions(w, defn, d)
    for fn in defn.step_phases:
        w.phase(d, defn, fn, STEP_KEY)
    w.emit(d, "_wb_truncated = truncated[e] != 0 or _wb_t + 1 >= MAX_STEPS",
           "_wb_done = terminated[e] != 0 or _wb_truncated",
           "_wb_next_t = 0 if _wb_done else _wb_t + 1  # the clock that the next observation sees",
           "_wb_next_ep = _wb_ep + 1 if _wb_done else _wb_ep", "_wb_return = _wb_return0 + reward[e, 0]",
           "if _wb_t + 1 >= MAX_STEPS:", "    truncated[e] = 1", "done[e] = 1 if _wb_done else 0", "if _wb_done:")
    _copy_terminal(w, defn, d + 1)
    _keep_final_active(w, defn, d + 1)
    if clock_seen_after_step(defn):
        w.emit(d + 1, "t[e] = _wb_t + 1  # as the final observation's phases see it")
    for fn in defn.observe_phases:
        w.phase(d + 1, defn, fn, FINAL_OBSERVE_KEY, guard=f"({KEEP_FINAL})", rename={"obs": "final_obs"})
    w.emit(d + 1, "last_length[e] = _wb_t + 1")
    for fn in defn.reset_phases:
        w.phase(d + 1, defn, fn, STEP_RESET_KEY)
    w.emit(d + 1, "episode[e] = _wb_ep + 1")
    w.emit(d, "last_return[e, 0] = _wb_return", "t[e] = _wb_next_t")
    for fn in next_observe_phases(defn):
        w.phase(d, defn, fn, NEXT_OBSERVE_KEY)


def _step_body(w: _Writer, defn: EnvDefinition, d: int):
    """The step, then for replicas whose episode ended the final observation (observe into final_obs),
    bookkeeping and reset, then every replica's observation. The replica's clock and return are read
    once: each array is read and written once where no episode ends."""
    # every load of the framework's arrays is issued before the phases run, so that their latencies overlap
    # the state's on GPUs (codegen_c._step_body)
    if defn.num_agents == 1:
        return _one_agent_step_body(w, defn, d)
    w.emit(d, "_wb_t = t[e] if active else 0", "_wb_ep = episode[e] if active else 0",
           "_wb_fresh = active and done[e] != 0  # the last step ended an episode")
    if w.one_agent_a_lane:  # its return is held across the phases
        w.emit(d, "_wb_last_return = last_return[e, lane] if active and lane < NUM_AGENTS else _wb_np.float32(0)",
               "_wb_return0 = _wb_np.float32(0) if _wb_fresh else _wb_last_return")
    w.agent_loop(d, ("reward[e, a] = 0",))
    _draw_actions(w, defn, d)
    w.emit(d, "if active and lane == 0:", "    terminated[e] = 0", "    truncated[e] = 0")
    w.barrier(d)
    for fn in defn.step_phases:
        w.phase(d, defn, fn, STEP_KEY)
        w.barrier(d)
    w.emit(d, "_wb_truncated = active and (truncated[e] != 0 or _wb_t + 1 >= MAX_STEPS)",
           "_wb_done = active and (terminated[e] != 0 or _wb_truncated)",
           "_wb_next_t = 0 if _wb_done else _wb_t + 1  # the clock that the next observation sees",
           "_wb_next_ep = _wb_ep + 1 if _wb_done else _wb_ep")
    _copy_terminal(w, defn, d)
    _keep_final_active(w, defn, d)
    running = "_wb_return0" if w.one_agent_a_lane else "(_wb_np.float32(0) if _wb_fresh else last_return[e, a])"
    w.agent_loop(d, (f"_wb_return = {running} + reward[e, a]", "last_return[e, a] = _wb_return"))
    w.emit(d, "if active and lane == 0:", "    t[e] = _wb_t + 1", "    if _wb_t + 1 >= MAX_STEPS:",
           "        truncated[e] = 1", "    done[e] = 1 if _wb_done else 0")
    w.barrier(d)
    for fn in defn.observe_phases:
        w.phase(d, defn, fn, FINAL_OBSERVE_KEY, guard=f"_wb_done and ({KEEP_FINAL})", rename={"obs": "final_obs"})
        w.barrier(d)
    for fn in defn.reset_phases:
        w.phase(d, defn, fn, STEP_RESET_KEY, guard="_wb_done")
        w.barrier(d)
    w.emit(d, "if _wb_done and lane == 0:", "    last_length[e] = _wb_t + 1", "    t[e] = 0",
           "    episode[e] = _wb_ep + 1")
    w.barrier(d)
    for fn in next_observe_phases(defn):
        w.phase(d, defn, fn, NEXT_OBSERVE_KEY)
        w.barrier(d)


def _reset_body(w: _Writer, defn: EnvDefinition, d: int):
    for fn in defn.reset_phases:
        w.phase(d, defn, fn, RESET_KEY)
        w.barrier(d)
    w.agent_loop(d, ("reward[e, a] = 0", "last_return[e, a] = 0"))
    w.emit(d, "if active and lane == 0:", "    t[e] = 0", "    episode[e] += 1", "    terminated[e] = 0",
           "    truncated[e] = 0", "    done[e] = 0", "    last_length[e] = 0")
    w.barrier(d)
    for fn in next_observe_phases(defn):
        w.phase(d, defn, fn, OBSERVE_KEY)
        w.barrier(d)


# the random key's seed and replica index (module docstring), for every phase of the replica
_REPLICA_KEY = ("_wb_seed = seed + e // span", "_wb_e = e % span")


def numba_drivers(defn: EnvDefinition, *, gpu: bool, layout: Layout) -> str:
    """Source of `_wb_reset` and `_wb_step` for the cpu (prange) or cuda (threads) target."""
    args = ", ".join(kernel_args(defn))
    text = []
    for kernel, body in (("_wb_reset", _reset_body), ("_wb_step", _step_body)):
        if gpu:
            w = _Writer("cuda.syncthreads()" if layout.threads_per_env > 1 else "",
                        one_agent_a_lane=defn.num_agents <= layout.threads_per_env)
            w.emit(0, f"def {kernel}({args}):", "    tid = cuda.threadIdx.x",
                   "    e = cuda.blockIdx.x * (cuda.blockDim.x // TPE) + tid // TPE", "    lane = tid % TPE",
                   "    active = e < n_envs")
            w.emit(1, *_REPLICA_KEY)
            body(w, defn, 1)
        else:
            w = _Writer("")
            w.emit(0, f"def {kernel}({args}):", "    for e in prange(n_envs):", "        lane = 0",
                   "        active = True")
            w.emit(2, *_REPLICA_KEY)
            body(w, defn, 2)
        text.append("\n".join(w.lines))
    return "\n\n\n".join(text) + "\n"
