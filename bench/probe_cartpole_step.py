"""What the CartPole step kernel's time at large sizes depends on: variants of the cuda-c target's
generated program (source edits of codegen_c.c_program's output, each compiled on its own), timed
in steady state as env.random_steps() (--mode random: blocks of 32 random steps from one CUDA graph;
sample-and-step pairs before 2c850f1, whose step kernels draw the actions themselves) or as env.step()
with the actions left in place (--mode step: the learner's step, what bench_env_traffic.py times).
Final observations are kept where an episode was truncated, as the trainer asks (--final-obs
every-end: wherever one ends, the env's default; before commit c377ab0 every end kept one).

    python bench/probe_cartpole_step.py                 # 1M and 10M replicas, every variant
    python bench/probe_cartpole_step.py --num-envs 1e7 --mode step --variants generated drop_length

Variants: generated (as shipped); no_ends (thresholds and time limit out of reach: no episode ever
ends, so no reset runs); no_ends_float (the same with the parameters and locals in float); sampled
(the action drawn in the step from a counter hash; timed as env.step() alone); one_round_key
(the reset key one hash round instead of five); regs32 / regs40 (register caps by launch bounds);
block256 / block512 / block1024 (replicas a block; 128 as shipped); no_slot (the terminal-frame
copy's checks removed); no_end_stores (no final observation, length or episode counter stored where an
episode ends); lazy_episode (the episode counter read only where an episode ends);
lazy_no_ends, lazy_sampled, lazy_float, lazy_no_end_stores (lazy_episode with no_ends, sampled,
float, no_end_stores); generated_x2, lazy_x2, lazy_x4, lazy_x2_no_ends (2 or 4 replicas a thread);
drop_episode, drop_length, lazy_drop_episode (without the episode counter's or the length's store);
length_in_clock, lazy_length_in_clock (the clock not reset where an episode ends, so that it holds
the ended episode's length and none is stored apart); warp_episode, warp_episode_length (a warp with
an ending replica stores every lane's counter, or counter and length: whole lines). Prints
microseconds a step, median of CUDA-event timings.
"""
from __future__ import annotations

import argparse
import re

import _common as C  # (also puts the checkout on sys.path)

NO_ENDS = dict(x_threshold=1e30, theta_threshold=3.14159, max_steps=10**9)
STEP_CALL = "step(e, a, action,"


def _in_step_kernel(edit):
    def apply(src):
        i = src.index(" wb_step(")
        return src[:i] + edit(src[i:])
    return apply


def _sampled(src, episode: bool = True):
    """The action drawn in the step from a counter hash (of the episode too, unless it is read lazily)."""
    j = src.rindex("\n", 0, src.index(STEP_CALL))
    draw = ("\n            action[e] = (int)(wb_mix64(((wb_u64)(unsigned)wb_e << 32 | (unsigned)wb_t)"
            f" ^ (wb_seed * WB_MUL1){' ^ ((wb_u64)wb_ep << 9)' if episode else ''} ^ 0x5555ULL) >> 63);")
    return src[:j] + draw + src[j:]


def _float(src):
    src = src.replace("constexpr double", "constexpr float").replace("const double", "const float")
    src = re.sub(r"(constexpr float \w+ = [-0-9.e]+);", r"\1f;", src)
    return src.replace("4.0 / 3.0", "4.0f / 3.0f")


def _one_round_key(src):
    old = "wb_make_key(wb_seed, wb_e, 0, (long long)wb_ep + 1, WB_RESET_STEP)"
    assert old in src
    return src.replace(old, "wb_mix64((wb_seed * WB_GOLDEN) ^ ((wb_u64)wb_e << 24) ^ (wb_u64)(wb_ep + 1))")


def _no_slot(src):
    return re.sub(r"if \(wb_done && wb_slot\[n_envs\] != 0 && wb_slot\[e\] != 0 && lane == 0\) \{.*?\n        \}\n", "",
                  src, count=1,
                  flags=re.S)


def _no_end_stores(src):
    """No stores where an episode ends but the reset's own (final observation, length, episode counter):
    what those scattered stores cost."""
    changed = re.sub(r"        if \(\(wb_truncated [^\n]*\) \{\n            for \(int a = lane; a < NUM_AGENTS; a \+= TPE\) \{\n#line [^\n]*\n"
                     r"                observe\(e, a, [^\n]*final_obs\);\n#line [^\n]*\n            \}\n        \}\n", "", src,
                     count=1)
    for line in ("        last_length[e] = wb_t + 1;\n", "        episode[e] = wb_ep + 1;\n"):
        assert line in changed, line
        changed = changed.replace(line, "", 1)
    return changed


def _drop(*what):
    """Without the named stores where an episode ends: "episode" (the counter's), "length" (last_length's)."""
    lines = {"episode": "        episode[e] = wb_ep + 1;\n", "length": "        last_length[e] = wb_t + 1;\n"}

    def edit(src):
        for piece in what:
            assert lines[piece] in src, piece
            src = src.replace(lines[piece], "", 1)
        return src
    return edit


def _lazy_episode(src):
    """The episode counter read only where an episode ends (no phase outside the reset takes a key; the
    drawn actions' key leaves the episode out)."""
    for old, new in (("    const int wb_ep = episode[e];\n", ""), ("(wb_u64)a, wb_ep, wb_t);", "(wb_u64)a, 0, wb_t);"),
                     ("    const int wb_next_ep = wb_done ? wb_ep + 1 : wb_ep;\n", ""),
                     ("    if (wb_done) {\n", "    if (wb_done) {\n        const int wb_ep = episode[e];\n")):
        assert old in src, old
        src = src.replace(old, new, 1)
    return src


def _length_in_clock(src):
    """The clock stored as the steps taken, not reset where an episode ends (done tells the next step to
    start it from 0): where done it is the ended episode's length, and no length is stored apart."""
    for old, new in (("    const int wb_t = t[e];  // t before this step: a time limit ends the episode\n",
                      "    const int wb_t_taken = t[e];\n    const bool wb_was_done = done[e] != 0;\n"
                      "    const int wb_t = wb_was_done ? 0 : wb_t_taken;\n"),
                     ("done[e] ? 0.0f : wb_last_return;", "wb_was_done ? 0.0f : wb_last_return;"),
                     ("        last_length[e] = wb_t + 1;\n", ""),
                     ("    t[e] = wb_next_t;\n", "    t[e] = wb_t + 1;\n")):
        assert old in src, old
        src = src.replace(old, new, 1)
    return src


def _warp_episode(length: bool = False):
    """A warp with an ending replica stores every lane's episode counter (and, with `length`, every lane's
    last length: the ending lanes' new one, the others' reloaded): whole lines, no partial sectors."""
    def edit(src):
        old = "        episode[e] = wb_ep + 1;\n    }\n"
        assert old in src
        new = "    }\n    if (__any_sync(__activemask(), wb_done)) {\n        episode[e] = wb_next_ep;\n"
        if length:
            assert "        last_length[e] = wb_t + 1;\n" in src
            src = src.replace("        last_length[e] = wb_t + 1;\n", "", 1)
            new += "        last_length[e] = wb_done ? wb_t + 1 : last_length[e];\n"
        return src.replace(old, new + "    }\n", 1)
    return edit


def _replicas_a_thread(k):
    """Each thread steps k replicas (its own block's and the next k - 1 blocks'; those blocks exit at once),
    the loop unrolled: the next replica's loads can overlap this one's arithmetic."""
    def edit(src):
        start = src.index("    const long long e64")
        end = src.rindex("}\n")
        body = src[start:end].replace("(long long)blockIdx.x * EPB", "(long long)(blockIdx.x + wb_k) * EPB", 1)
        body = body.replace("if (!active)\n        return;", "if (!active)\n        continue;", 1)
        body = "\n".join("    " + line if line and not line.startswith("#") else line for line in body.split("\n"))
        return (src[:start] + f"    if (blockIdx.x % {k} != 0)\n        return;\n#pragma unroll\n"
                f"    for (int wb_k = 0; wb_k < {k}; ++wb_k) {{\n" + body + "    }\n" + src[end:])
    return edit


def _chain(*edits):
    def apply(src):
        for edit in edits:
            src = edit(src)
        return src
    return apply


def _bounds(blocks):
    return lambda src: src.replace(" wb_step(", f" __launch_bounds__(128, {blocks}) wb_step(", 1)


# name: (source edit of the step kernel, whole-program edit, env parameters, threads a block)
VARIANTS = {
    "generated": (None, None, {}, 128),
    "no_ends": (None, None, NO_ENDS, 128),
    "no_ends_float": (None, _float, NO_ENDS, 128),
    "sampled": (_sampled, None, {}, 128),
    "one_round_key": (_one_round_key, None, {}, 128),
    "regs32": (_bounds(16), None, {}, 128),
    "regs40": (_bounds(12), None, {}, 128),
    "block256": (None, None, {}, 256),
    "block512": (None, None, {}, 512),
    "block1024": (None, None, {}, 1024),
    "no_slot": (_no_slot, None, {}, 128),
    "no_end_stores": (_no_end_stores, None, {}, 128),
    "lazy_episode": (_lazy_episode, None, {}, 128),
    "lazy_no_ends": (_lazy_episode, None, NO_ENDS, 128),
    "lazy_sampled": (_chain(_lazy_episode, lambda src: _sampled(src, episode=False)), None, {}, 128),
    "generated_x2": (_replicas_a_thread(2), None, {}, 128),
    "lazy_x2": (_chain(_lazy_episode, _replicas_a_thread(2)), None, {}, 128),
    "lazy_x4": (_chain(_lazy_episode, _replicas_a_thread(4)), None, {}, 128),
    "lazy_x2_no_ends": (_chain(_lazy_episode, _replicas_a_thread(2)), None, NO_ENDS, 128),
    "lazy_float": (_lazy_episode, _float, {}, 128),
    "length_in_clock": (_length_in_clock, None, {}, 128),
    "drop_episode": (_drop("episode"), None, {}, 128),
    "drop_length": (_drop("length"), None, {}, 128),
    "lazy_drop_episode": (_chain(_lazy_episode, _drop("episode")), None, {}, 128),
    "warp_episode": (_warp_episode(), None, {}, 128),
    "warp_episode_length": (_warp_episode(length=True), None, {}, 128),
    "lazy_length_in_clock": (_chain(_lazy_episode, _length_in_clock), None, {}, 128),
    "lazy_no_end_stores": (_chain(_lazy_episode, _no_end_stores), None, {}, 128),
}


def program(name):
    """codegen_c.c_program with the variant's edits."""
    from workbench.compiler import codegen_c
    step_edit, whole_edit, _, _ = VARIANTS[name]
    original = codegen_c.c_program

    def edited(defn, layout):
        src = original(defn, layout)
        if step_edit is not None:
            changed = _in_step_kernel(step_edit)(src)
            assert changed != src, f"variant {name}: the edit found nothing to change"
            src = changed
        return whole_edit(src) if whole_edit is not None else src
    return original, edited


def one(name: str, num_envs: int, repeats: int, mode: str = "random", final_obs: str = "truncated") -> float:
    """Microseconds a step of `num_envs` CartPole replicas under the variant: a random step (mode
    "random"), or env.step() with the actions left in place (mode "step", as the learner steps); final
    observations kept where truncated (as the trainer asks) or at every end (the env's default)."""
    import workbench as wb
    from workbench.compiler import codegen, codegen_c
    from workbench.compiler.targets import cuda_c
    from workbench.runtime import env as env_mod
    _, _, params, block = VARIANTS[name]
    original, edited = program(name)
    layout = cuda_c.gpu_layout
    env_mod._KERNEL_CACHE.clear()
    codegen_c.c_program = edited
    cuda_c.gpu_layout = lambda n, block_size=block, **k: codegen.gpu_layout(n, block_size, **k)
    try:
        env = wb.make("cartpole", num_envs=num_envs, target="cuda-c", seed=0, **params)
    finally:
        codegen_c.c_program, cuda_c.gpu_layout = original, layout
    env.keep_final_obs = final_obs == "every-end"
    block_steps = env.RANDOM_BLOCK
    if name in ("sampled", "lazy_sampled") or mode == "step":
        # (the step draws its own actions: env.step() alone, its graph replayed a step at a time)
        env.sample_actions()

        def steps():
            for _ in range(block_steps):
                env.step()
    else:
        def steps():
            env.random_steps(block_steps)
    return C.steady_us_per_step(steps, block_steps, repeats)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", nargs="+", type=C.count, default=[10**6, 10**7])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--mode", choices=["random", "step"], default="random",
                        help="random: env.random_steps(); step: env.step() with the actions left in place")
    parser.add_argument("--final-obs", choices=("truncated", "every-end"), default="truncated",
                        help="where the step keeps the final observation (Env.keep_final_obs): where an episode was "
                             "truncated, as the trainer asks, or wherever one ends, the env's default")
    args = parser.parse_args(argv)
    info = C.machine()
    print(f"# probe_cartpole_step on {info['gpu']}; torch {info['torch']}; mode {args.mode}, "
          f"final obs {args.final_obs}")
    rows = []
    for n in args.num_envs:
        for name in args.variants:
            us = one(name, n, args.repeats, args.mode, args.final_obs)
            rows.append([f"{n:,}", name, f"{us:.1f}"])
            print(f"  {n:>10,} {name:14s} {us:8.1f} us/step", flush=True)
    print()
    print(C.markdown(["replicas", "variant", "us a step"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
