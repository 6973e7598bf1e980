"""Generates the CUDA C program of an env for the cuda-c target: its parameters as constants, a
view type per array, the env's own C source, then the `wb_reset` and `wb_step` kernels.

The kernels do what codegen.py's GPU drivers do (clear rewards and flags, time-limit truncation,
episode bookkeeping, same-step auto-reset keeping final_obs where codegen.KEEP_FINAL says and the
recorded replicas' terminal states) with the same thread mapping
(codegen.gpu_layout): `TPE` lanes per replica with the agents strided over them (a = lane;
a < NUM_AGENTS; a += TPE), `EPB` replicas per block, `__syncthreads()` between phases only when a
replica has more than one lane. Entity phases stride the entity's instances over the same lanes;
per-replica phases run on lane 0.

Arrays reach the phases as raw pointers to row-major storage: [E, *shape] for per-env arrays,
[E, NUM_AGENTS, *shape] for per-agent arrays. Each array NAME also gets a type NAME_view (a
wb_view, see cuda/wb_runtime.cuh) that a phase may declare instead of a pointer and index as
NAME(env, agent, i, ...): `float* x` -> x[env]; `obs_view obs` -> obs(env, agent, 0).
`#line` directives map compiler messages back to the env's own C lines: an error in a phase body
names its line, a phase/array type mismatch names the phase's line.
"""
from __future__ import annotations

import math

import numpy as np

from .codegen import ACTION_STREAM, ENTITY_STREAM, Layout, drawn_actions, terminal_arrays
from .envdef import FINAL_ACTIVE, EnvDefinition, phase_index
from .envdef_c import c_phases, c_type

DRIVER_FILE = "<workbench driver>"
RUNTIME_HEADER = "wb_runtime.cuh"
_RESYNC = "\0resync"  # placeholder line: becomes `#line <its successor's line> DRIVER_FILE`

# {stream}: the agent slot of the key; wb_seed, wb_e: the replica's seed and index in its block (codegen)
# the step kernel's keys come from the replica's clock as read at its start (wb_t, wb_ep: registers, not reloads)
STEP_KEY = "wb_make_key(wb_seed, wb_e, {stream}, wb_ep, wb_t)"
FINAL_OBSERVE_KEY = "wb_make_key(wb_seed, wb_e, {stream}, wb_ep, (wb_u64)wb_t + 1 + WB_OBSERVE_STEP)"
STEP_RESET_KEY = "wb_make_key(wb_seed, wb_e, {stream}, (long long)wb_ep + 1, WB_RESET_STEP)"
NEXT_OBSERVE_KEY = "wb_make_key(wb_seed, wb_e, {stream}, wb_next_ep, (wb_u64)wb_next_t + WB_OBSERVE_STEP)"
RESET_KEY = "wb_make_key(wb_seed, wb_e, {stream}, (long long)episode[e] + 1, WB_RESET_STEP)"
# codegen.KEEP_FINAL: where an episode ends, whether its final observation is observed into final_obs
KEEP_FINAL = "wb_truncated || wb_slot[n_envs] != 0 || wb_slot[n_envs + 1] != 0"
OBSERVE_KEY = "wb_make_key(wb_seed, wb_e, {stream}, episode[e], (wb_u64)t[e] + WB_OBSERVE_STEP)"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _c_double(value: float) -> str:
    if math.isnan(value):
        return '__builtin_nan("")'
    if math.isinf(value):
        return ("-" if value < 0 else "") + "__builtin_huge_val()"
    return repr(value)


def _c_float(value) -> str:
    """A float32 value as a C float expression (the exact value: its double text, converted)."""
    text = _c_double(float(value))
    return f"(float){text}" if text.startswith(("_", "-_")) else text + "f"


def _c_constant(name: str, value) -> str:
    """One PARAMS entry as a C++ constant (numbers and flat sequences of numbers)."""
    if isinstance(value, (bool, np.bool_)):
        return f"constexpr bool {name} = {'true' if value else 'false'};"
    if isinstance(value, (int, np.integer)):
        value = int(value)
        return (f"constexpr int {name} = {value};" if -2**31 <= value < 2**31
                else f"constexpr long long {name} = {value}LL;")
    if isinstance(value, np.float32):  # a float parameter under PRECISION = "float32"
        return f"constexpr float {name} = {_c_float(value)};"
    if isinstance(value, (float, np.floating)):
        return f"constexpr double {name} = {_c_double(float(value))};"
    if isinstance(value, (list, tuple, np.ndarray)) and len(value) and \
            all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in value):
        if all(isinstance(v, (int, np.integer)) for v in value):
            return f"__device__ constexpr long long {name}[{len(value)}] = {{{', '.join(str(int(v)) for v in value)}}};"
        if all(isinstance(v, (np.float32, int, np.integer)) for v in value):
            return (f"__device__ constexpr float {name}[{len(value)}] = "
                    f"{{{', '.join(_c_float(np.float32(v)) for v in value)}}};")
        return (f"__device__ constexpr double {name}[{len(value)}] = "
                f"{{{', '.join(_c_double(float(v)) for v in value)}}};")
    return f"// PARAMS['{name}'] ({type(value).__name__}) has no C form"


def _view_type(spec) -> str:
    dims = (["NUM_AGENTS"] if spec.layout == "agent" else []) + [str(d) for d in spec.shape]
    return f"wb_view<{', '.join([c_type(spec.dtype)] + dims)}>"


class _Writer:
    """C driver text: agent loops, barriers and phase calls, as codegen._Writer writes Python."""

    def __init__(self, defn: EnvDefinition, layout: Layout, c_file: str):
        self.lines: list = []
        self.defn = defn
        self.sync = layout.threads_per_env > 1
        self.agents_per_lane = -(-defn.num_agents // layout.threads_per_env)
        self.c_file = c_file

    def emit(self, depth: int, *lines: str):
        self.lines.extend(line if line.startswith(("#", "\0")) else "    " * depth + line for line in lines)

    def barrier(self, depth: int):
        if self.sync:
            self.emit(depth, "__syncthreads();")

    def agent_loop(self, depth: int, body, guard: str = "active", count: str = "NUM_AGENTS"):
        self.emit(depth, f"if ({guard}) {{", f"    for (int a = lane; a < {count}; a += TPE) {{")
        self.emit(depth + 2, *body)
        self.emit(depth, "    }", "}")

    def index(self, phase) -> str | None:
        return phase_index(self.defn.name, f"{phase.name}() (line {phase.line})", phase.args, self.defn.entities,
                           phase.line)

    def call(self, phase, key_expr: str, rename: dict | None = None) -> tuple:
        index = self.index(phase)
        names = {"env": "e", "key": "key", **(rename or {})}
        if index is not None:
            names[index] = "a"
        if index is None:
            stream = "0"
        elif index == "agent":
            stream = "a"
        else:
            stream = f"{(list(self.defn.entities).index(index) + 1) * ENTITY_STREAM}ULL + (wb_u64)a"
        lines = [f"const wb_key key = {key_expr.format(stream=stream)};"] if "key" in phase.args else []
        lines += [f"#line {phase.line} {self.c_file}",
                  f"{phase.name}({', '.join(names.get(p, p) for p in phase.args)});", _RESYNC]
        return tuple(lines)

    def phase(self, depth: int, phase, key_expr: str, guard: str = "active", rename: dict | None = None):
        """One phase over the agents, an entity's instances (strided over the lanes as agents are)
        or the replica once (its first lane), as codegen._Writer.phase; `rename` binds a parameter
        to another array (the final observation: obs -> final_obs)."""
        index = self.index(phase)
        if index is None:
            self.lane0(depth, guard, *self.call(phase, key_expr, rename))
        else:
            count = "NUM_AGENTS" if index == "agent" else str(self.defn.entities[index])
            self.agent_loop(depth, self.call(phase, key_expr, rename), guard, count)

    def lane0(self, depth: int, guard: str, *body: str):
        self.emit(depth, f"if ({guard} && lane == 0) {{")
        self.emit(depth + 1, *body)
        self.emit(depth, "}")


EA = "const long long ea = (long long)e * NUM_AGENTS + a;"


def c_terminal_arrays(defn: EnvDefinition) -> list:
    """codegen.terminal_arrays with the C kernels' parameter names (`wb_final_NAME`), in the same order;
    `wb_slot` (int) comes before them."""
    return [(arg.lstrip("_"), spec) for arg, spec in terminal_arrays(defn)]


def _copy_terminal(w: _Writer, d: int):
    """As codegen._copy_terminal: a recorded replica whose episode ends in this step keeps its state."""
    # a replica's slot is read only where an episode ends and someone records (wb_slot[n_envs], the same
    # address for every replica, is 1 then): otherwise no extra bytes move (codegen.terminal_arrays)
    ending = "wb_done && wb_slot[n_envs] != 0 && wb_slot[e] != 0"
    agent_copies, env_copies = [], []
    for arg, spec in c_terminal_arrays(w.defn):
        size = int(np.prod(spec.shape, dtype=np.int64))
        dst, src = ("ws * NUM_AGENTS + a", "ea") if spec.layout == "agent" else ("ws", "e")
        copies = agent_copies if spec.layout == "agent" else env_copies
        copies += ([f"{arg}[{dst}] = {spec.name}[{src}];"] if size == 1 else
                   [f"for (long long i = 0; i < {size}; ++i)",
                    f"    {arg}[({dst}) * {size} + i] = {spec.name}[(long long){src} * {size} + i];"])
    if agent_copies:
        w.agent_loop(d, [EA, "const long long ws = wb_slot[e] - 1;"] + agent_copies, guard=ending)
    if env_copies:
        w.lane0(d, ending, "const long long ws = wb_slot[e] - 1;", *env_copies)


def _keep_final_active(w: _Writer, d: int):
    """As codegen._keep_final_active: where the episode ends, each agent's ACTIVE flag before the reset."""
    if w.defn.active is not None:
        w.agent_loop(d, [EA, f"{FINAL_ACTIVE}[ea] = {w.defn.active}[ea] != 0 ? 1 : 0;"], guard="wb_done")


def _draw_actions(w: _Writer, d: int):
    """codegen._draw_actions: where `draw` is set, every agent's action drawn before the step's phases."""
    entries = drawn_actions(w.defn)
    if entries:
        kind = c_type(w.defn.arrays["action"].dtype)
        heads = len(entries)
        key = f"const wb_key wb_akey = wb_make_key(wb_seed, wb_e, {ACTION_STREAM}ULL + (wb_u64)a, wb_ep, wb_t);"
        draws = [f"action[ea * {heads} + {h}] = ({kind})wb_randint(wb_akey, {h}, {n});"
                 for h, (_, n) in enumerate(entries)]
        w.agent_loop(d, [EA, key] + draws, guard="active && draw != 0")


def _prefetch_step_state(w: _Writer, phases: dict, d: int):
    """L2 prefetches of the replica's state rows that the step phases take, issued with the driver's own
    loads: a phase's loads follow the driver's stores, which they may not pass unless the compiler
    proves the arrays apart (CartPole at 10M replicas on an H100: 342 -> 325 us a step)."""
    taken = {arg for phase in phases["step"] for arg in phase.args}
    for name, spec in w.defn.arrays.items():
        if name in taken and spec.owner == "env":
            size = int(np.prod(spec.shape, dtype=np.int64)) * (w.defn.num_agents if spec.layout == "agent" else 1)
            w.emit(d, f"wb_prefetch({name} + (long long)e * {size});")


def _clock_seen_after_step(phases: dict) -> bool:
    """Whether a final observe or reset phase takes `t` (codegen.clock_seen_after_step)."""
    return any("t" in phase.args for phase in phases["observe"] + phases["reset"])


def _one_lane_step_body(w: _Writer, phases: dict, d: int):
    """_step_body for a replica on one lane (single-agent envs): no barriers, so the path of a replica
    whose episode ended is one branch, and the return and clock are written once after it."""
    w.emit(d, "if (!active)", "    return;")
    _prefetch_step_state(w, phases, d)
    w.emit(d, "const int wb_t = t[e];  // t before this step: a time limit ends the episode",
           "const int wb_ep = episode[e];",
           "const float wb_last_return = last_return[e];  // loaded whatever done says: one round trip, not two",
           "const float wb_return0 = done[e] ? 0.0f : wb_last_return;  // a replica done at the last step starts anew",
           "reward[e] = 0;", "terminated[e] = 0;", "truncated[e] = 0;")
    _draw_actions(w, d)
    for phase in phases["step"]:
        w.phase(d, phase, STEP_KEY)
    w.emit(d, "const bool wb_truncated = truncated[e] != 0 || wb_t + 1 >= MAX_STEPS;",
           "const bool wb_done = terminated[e] != 0 || wb_truncated;",
           "const int wb_next_t = wb_done ? 0 : wb_t + 1;  // the clock that the next observation sees",
           "const int wb_next_ep = wb_done ? wb_ep + 1 : wb_ep;",
           "const float wb_return = wb_return0 + reward[e];",
           "if (wb_t + 1 >= MAX_STEPS)", "    truncated[e] = 1;", "done[e] = wb_done ? 1 : 0;", "if (wb_done) {")
    _copy_terminal(w, d + 1)
    _keep_final_active(w, d + 1)
    if _clock_seen_after_step(phases):
        w.emit(d + 1, "t[e] = wb_t + 1;  // as the final observation's phases see it")
    for phase in phases["observe"]:
        w.phase(d + 1, phase, FINAL_OBSERVE_KEY, guard=f"({KEEP_FINAL})", rename={"obs": "final_obs"})
    w.emit(d + 1, "last_length[e] = wb_t + 1;")
    for phase in phases["reset"]:
        w.phase(d + 1, phase, STEP_RESET_KEY)
    w.emit(d + 1, "episode[e] = wb_ep + 1;")
    w.emit(d, "}", "last_return[e] = wb_return;  // (codegen: episode bookkeeping)", "t[e] = wb_next_t;")
    for phase in phases["next_observe"]:
        w.phase(d, phase, NEXT_OBSERVE_KEY)


def _step_body(w: _Writer, phases: dict, d: int):
    """The step, then for replicas whose episode ended the final observation (observe into final_obs),
    bookkeeping and reset, then every replica's observation. The replica's clock and return stay in
    registers from their first load: each array is read and written once where no episode ends."""
    # every load of the framework's arrays is issued before the phases run: their latencies overlap the
    # state's instead of following the step (CartPole at 10M replicas on an H100: 477 -> 437 us a step)
    if not w.sync:
        return _one_lane_step_body(w, phases, d)
    w.emit(d, "const int wb_t = active ? t[e] : 0;  // t before this step: a time limit ends the episode",
           "const int wb_ep = active ? episode[e] : 0;",
           "const bool wb_fresh = active && done[e] != 0;  // the last step ended an episode")
    held = w.agents_per_lane == 1  # one agent a lane: its return is held in a register across the phases
    if held:
        w.emit(d, "const float wb_last_return = active && lane < NUM_AGENTS ? "
                  "last_return[(long long)e * NUM_AGENTS + lane] : 0.0f;",
               "const float wb_return0 = wb_fresh ? 0.0f : wb_last_return;")
    w.agent_loop(d, ("reward[(long long)e * NUM_AGENTS + a] = 0;",))
    _draw_actions(w, d)
    w.lane0(d, "active", "terminated[e] = 0;", "truncated[e] = 0;")
    w.barrier(d)
    for phase in phases["step"]:
        w.phase(d, phase, STEP_KEY)
        w.barrier(d)
    w.emit(d, "const bool wb_truncated = active && (truncated[e] != 0 || wb_t + 1 >= MAX_STEPS);",
           "const bool wb_done = active && (terminated[e] != 0 || wb_truncated);",
           "const int wb_next_t = wb_done ? 0 : wb_t + 1;  // the clock that the next observation sees",
           "const int wb_next_ep = wb_done ? wb_ep + 1 : wb_ep;")
    _copy_terminal(w, d)
    _keep_final_active(w, d)
    w.agent_loop(d, (EA, f"const float wb_return = {'wb_return0' if held else '(wb_fresh ? 0.0f : last_return[ea])'}"
                         " + reward[ea];", "last_return[ea] = wb_return;"))
    w.lane0(d, "active", "t[e] = wb_t + 1;", "if (wb_t + 1 >= MAX_STEPS)", "    truncated[e] = 1;",
            "done[e] = wb_done ? 1 : 0;")
    w.barrier(d)
    for phase in phases["observe"]:
        w.phase(d, phase, FINAL_OBSERVE_KEY, guard=f"wb_done && ({KEEP_FINAL})", rename={"obs": "final_obs"})
        w.barrier(d)
    for phase in phases["reset"]:
        w.phase(d, phase, STEP_RESET_KEY, guard="wb_done")
        w.barrier(d)
    w.lane0(d, "wb_done", "last_length[e] = wb_t + 1;", "t[e] = 0;", "episode[e] = wb_ep + 1;")
    w.barrier(d)
    for phase in phases["next_observe"]:
        w.phase(d, phase, NEXT_OBSERVE_KEY)
        w.barrier(d)


def _reset_body(w: _Writer, phases: dict, d: int):
    for phase in phases["reset"]:
        w.phase(d, phase, RESET_KEY)
        w.barrier(d)
    w.agent_loop(d, (EA, "reward[ea] = 0;", "last_return[ea] = 0;"))
    w.lane0(d, "active", "t[e] = 0;", "episode[e] += 1;", "terminated[e] = 0;", "truncated[e] = 0;", "done[e] = 0;",
            "last_length[e] = 0;")
    w.barrier(d)
    for phase in phases["next_observe"]:
        w.phase(d, phase, OBSERVE_KEY)
        w.barrier(d)


def c_program(defn: EnvDefinition, layout: Layout) -> str:
    """Full CUDA C++ source for `defn` (which must carry C phases): compile it with the directory of
    wb_runtime.cuh on the include path; its kernels are `wb_reset` and `wb_step`, each taking
    (int n_envs, unsigned long long seed, int span, int draw, <one pointer per array, in defn.arrays order>,
    int* wb_slot [n_envs + 1], <one pointer per terminal copy, in c_terminal_arrays order>); replica e draws from
    the key of replica e % span seeded seed + e / span, as codegen's drivers do."""
    phases = c_phases(defn)
    phases["next_observe"] = [] if defn.obs_state else phases["observe"]  # (codegen.next_observe_phases)
    c_file = _quote(defn.c_filename or f"<warpenv {defn.name}>")
    head = [f"// CUDA C program of env '{defn.name}', generated by workbench.compiler.codegen_c",
            f"#include \"{RUNTIME_HEADER}\"", "",
            "namespace wb_params {  // PARAMS, resolved"]
    head += [_c_constant(k, v) for k, v in defn.kernel_params().items() if k.isidentifier()]
    head += ["}", "using namespace wb_params;", "",
             f"constexpr int NUM_AGENTS = {defn.num_agents};",
             f"constexpr int MAX_STEPS = {defn.max_steps};",
             f"constexpr int TPE = {layout.threads_per_env};  // threads (lanes) per replica",
             f"constexpr int EPB = {layout.envs_per_block};  // replicas per block", "",
             "// Array views, row-major: per-env arrays [E, *shape], per-agent arrays [E, NUM_AGENTS, *shape]."]
    for spec in defn.arrays.values():
        dims = ", ".join(["E"] + (["NUM_AGENTS"] if spec.layout == "agent" else []) + [str(d) for d in spec.shape])
        head.append(f"typedef {_view_type(spec)} {spec.name}_view;  // {spec.name}: {spec.dtype.name} [{dims}]")
    head += ["", f"#line 1 {c_file}"]
    source = defn.c_source if defn.c_source.endswith("\n") else defn.c_source + "\n"

    # __restrict__: the store's arrays never overlap, so a write to one need not reload the others (CartPole
    # at 10M replicas: 500 against 578 us a step on an H100)
    params = ",\n".join([f"    {c_type(s.dtype)}* __restrict__ {s.name}" for s in defn.arrays.values()]
                        + ["    int* __restrict__ wb_slot"]
                        + [f"    {c_type(s.dtype)}* __restrict__ {arg}" for arg, s in c_terminal_arrays(defn)])
    # an env may cap its kernels' registers a thread (#define WB_MAX_REGISTERS N in its C source): more
    # replicas then share a multiprocessor (Tag continuous at 1000 replicas: 78 -> 64, 113.6 -> 106.5 us)
    kernels = [_RESYNC, "#ifdef WB_MAX_REGISTERS", "#define WB_REGISTER_CAP __maxnreg__(WB_MAX_REGISTERS)", "#else",
               "#define WB_REGISTER_CAP", "#endif", ""]
    for kernel, body in (("wb_reset", _reset_body), ("wb_step", _step_body)):
        w = _Writer(defn, layout, c_file)
        w.emit(0, f"extern \"C\" __global__ void WB_REGISTER_CAP {kernel}(", "    int n_envs,", "    wb_u64 seed,",
               "    int span,", "    int draw,", f"{params})", "{",
               "    const int tid = threadIdx.x;",
               "    const long long e64 = (long long)blockIdx.x * EPB + tid / TPE;",
               "    const bool active = e64 < n_envs;",
               "    const int e = (int)e64;  // in range whenever active",
               "    const int lane = tid % TPE;",
               "    wb_u64 wb_seed = seed;  // e draws as replica e % span of seed + e / span",
               "    int wb_e = e;",
               "    if (e >= span) {  // (no division where one seed spans every replica, as it mostly does)",
               "        wb_seed += (wb_u64)(e / span);",
               "        wb_e = e % span;",
               "    }")
        body(w, phases, 1)
        w.emit(0, "}", "")
        kernels += w.lines

    lines = "\n".join(head + source.split("\n")[:-1] + kernels).split("\n")
    for k, line in enumerate(lines):
        if line == _RESYNC:
            lines[k] = f"#line {k + 2} {_quote(DRIVER_FILE)}"
    return "\n".join(lines) + "\n"
