"""workbench.runtime.sampling.Sampler against torch's samplers, median time per call.

Categorical, N rows x K categories, from float32 logits:
    ours         Sampler.categorical(logits, out)            (out: int32 [N], preallocated)
    multinomial  torch.multinomial(torch.softmax(logits, -1), 1)
    Categorical  torch.distributions.Categorical(logits=logits).sample()
Gaussian, N rows x d=K dimensions:
    ours         Sampler.gaussian(mean, std, out, low=-1, high=1)   (std [d], clipped)
    Normal       torch.distributions.Normal(mean, std).sample()
    Normal+clamp the same, then .clamp_(-1, 1)
cuda: CUDA-event times on the current stream; cpu: wall clock.

    python bench/bench_sampling.py --devices cpu --n 1e4 1e5 --k 2 21
"""
from __future__ import annotations

import argparse

import _common as C


def timer(device, repeats):
    if device.type == "cuda":
        return lambda fn: C.median_event_seconds(fn, repeats, inner=5)[0]
    return lambda fn: C.median_seconds(fn, device, repeats, inner=1)[0]


def bench_cell(sampler, device, n, k, repeats) -> dict:
    import torch
    gen = torch.Generator(device=device).manual_seed(0)
    logits = torch.randn(n, k, device=device, generator=gen)
    out = torch.empty(n, dtype=torch.int32, device=device)
    mean = torch.randn(n, k, device=device, generator=gen)
    std = torch.rand(k, device=device, generator=gen) + 0.1
    gout = torch.empty(n, k, device=device)
    calls = {
        "ours_categorical": lambda: sampler.categorical(logits, out),
        "torch_multinomial": lambda: torch.multinomial(torch.softmax(logits, -1), 1),
        "torch_Categorical": lambda: torch.distributions.Categorical(logits=logits).sample(),
        "ours_gaussian": lambda: sampler.gaussian(mean, std, gout, low=-1.0, high=1.0),
        "torch_Normal": lambda: torch.distributions.Normal(mean, std).sample(),
        "torch_Normal_clamp": lambda: torch.distributions.Normal(mean, std).sample().clamp_(-1.0, 1.0),
    }
    time_it = timer(device, repeats)
    row = {"device": str(device), "n": n, "k": k}
    for name, fn in calls.items():
        fn()  # warm-up (compiles our kernels on first use)
        C.sync(device)
        row[name] = time_it(fn)
    return row


def main(argv=None) -> int:
    import torch

    from workbench.runtime.sampling import Sampler
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", nargs="+", default=None, help="cpu and/or cuda (default: cuda if present, and cpu)")
    parser.add_argument("--n", nargs="+", type=C.count, default=[10**4, 10**5, 10**6])
    parser.add_argument("--k", nargs="+", type=int, default=[2, 21, 100])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    devices = args.devices or (["cuda", "cpu"] if torch.cuda.is_available() else ["cpu"])
    info = C.machine()
    rows = []
    for dev in devices:
        device = torch.device(dev)
        if device.type == "cuda":
            device = torch.device("cuda", torch.cuda.current_device())
        sampler = Sampler("cuda" if device.type == "cuda" else "cpu", seed=0)
        for n in args.n:
            for k in args.k:
                try:
                    row = bench_cell(sampler, device, n, k, args.repeats)
                except Exception as exc:  # noqa: BLE001 - recorded, the other cells still run
                    row = {"device": str(device), "n": n, "k": k, "error": f"{type(exc).__name__}: {exc}"[:300]}
                rows.append(row)
                print("  " + (f"{dev} N={n} K={k}: ours {C.fmt_time(row['ours_categorical'])}, multinomial "
                              f"{C.fmt_time(row['torch_multinomial'])}" if "error" not in row else f"{dev} N={n} K={k}: "
                              f"FAIL {row['error']}"), flush=True)
    table = []
    for row in rows:
        if "error" in row:
            table.append([row["device"], f"{row['n']:,}", row["k"]] + ["FAIL"] + ["-"] * 8)
            continue
        best_cat = min(row["torch_multinomial"], row["torch_Categorical"])
        table.append([row["device"], f"{row['n']:,}", row["k"], C.fmt_time(row["ours_categorical"]),
                      C.fmt_time(row["torch_multinomial"]), C.fmt_time(row["torch_Categorical"]),
                      f"{best_cat / row['ours_categorical']:.3g}x", C.fmt_time(row["ours_gaussian"]),
                      C.fmt_time(row["torch_Normal"]), C.fmt_time(row["torch_Normal_clamp"]),
                      f"{row['torch_Normal_clamp'] / row['ours_gaussian']:.3g}x"])
    print()
    print(C.markdown(["device", "N", "K (=d)", "ours cat", "multinomial", "Categorical", "speedup cat",
                      "ours gauss", "Normal", "Normal+clamp", "speedup gauss"], table))
    print("\nspeedup cat: the faster torch categorical over ours; speedup gauss: Normal+clamp over ours "
          "(ours also writes into a preallocated int32 / float32 out)")
    C.write_json(args.out, {"bench": "sampling", "machine": info, "args": vars(args), "results": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
