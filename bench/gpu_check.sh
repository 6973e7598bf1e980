#!/usr/bin/env bash
# Every GPU check in one script: tests on the real GPU, full-size cross-target checks,
# compute-sanitizer, benchmarks, then a short table. Stages (default: all of them):
#     bash bench/gpu_check.sh tests check sanitize     # correctness
#     bash bench/gpu_check.sh bench                    # speed
#     bash bench/gpu_check.sh scaling                  # data-parallel training on every GPU here
#     bash bench/gpu_check.sh population               # populations beside PureJaxRL (with .peers/ carried)
#     bash bench/gpu_check.sh training                 # CartPole PPO, default settings, beside PureJaxRL (.peers/)
#     bash bench/gpu_check.sh startup                  # a new process to its first iterations
#     bash bench/gpu_check.sh envonly                  # env-only CartPole beside gymnax (.peers/)
#     bash bench/gpu_check.sh tag_training             # Tag A2C beside WarpDrive's trainer (.peers/)
#     bash bench/gpu_check.sh learning                 # every shipped config to its threshold, defaults
# Results land in $OUT (default ./gpu_out): summary.md (the table, last), results.tar.gz (logs, JSON),
# and from the tests stage gpu-record.md (commit, device, date, counts, failing tests): copy it to
# docs/gpu-record.md and commit it (set WORKBENCH_COMMIT=<sha> when this tree is a copy: its .git may be
# stale, and a HEAD the files differ from is recorded as <sha>+changes).
# Needs no network: wheels missing from the machine's image are taken from .whl/ when present. The
# image lacks gymnasium (reference checks) and IPython (the magic's tests); fill .whl/ beforehand with
#     pip download gymnasium ipython --python-version 3.12 --only-binary=:all: --platform manylinux2014_x86_64 -d .whl
# and delete numpy and typing_extensions from it (the image brings its own; a downloaded numpy would
# shadow the image's). The notebooks stage needs a Jupyter kernel, which the image lacks too; its
# wheels go in .whl-nb/ (carried only for that stage):
#     pip download nbclient nbformat ipykernel ipywidgets matplotlib ipython --python-version 3.12 \
#         --only-binary=:all: --platform manylinux2014_x86_64 -d .whl-nb
# then delete numpy, typing_extensions, packaging, psutil and pygments from it.
#     bash bench/gpu_check.sh notebooks               # every notebook top to bottom at its GPU size
set -u
OUT=${OUT:-$PWD/gpu_out}
LOGS=${LOGS:-/tmp/gpu_check_logs}  # packed into $OUT/results.tar.gz at the end
rm -rf "$LOGS"; mkdir -p "$LOGS" "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
STAGES=${*:-tests check sanitize bench learner}
SUMMARY=$LOGS/summary.rows
: > "$SUMMARY"
row() { echo "| $1 | $2 | $3 |" >> "$SUMMARY"; }

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$LOGS/install.log" 2>&1 || { cat "$LOGS/install.log"; exit 1; }
{ nvidia-smi; python3 -c "import torch, numba, numpy; from numba import cuda; print('torch', torch.__version__, 'numba', numba.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name())"; } > "$LOGS/machine.log" 2>&1
DEVICE=$(python3 -c "import torch; print(torch.cuda.get_device_name())" 2>/dev/null || echo "no GPU")
python3 -c "import workbench as wb; print('targets:', wb.available_targets())" >> "$LOGS/machine.log" 2>&1

write_summary() {  # after every step, so a run cut off at its time limit still returns what it did
  python3 bench/summarize.py "$LOGS" > "$LOGS/bench_table.md" 2>&1 || true
  {
    echo "# GPU check: $DEVICE, $(date -u +%Y-%m-%d), stages: $STAGES"
    echo
    echo "| step | result | time / detail |"
    echo "|---|---|---|"
    cat "$SUMMARY"
    echo
    cat "$LOGS/bench_table.md"
  } > "$OUT/summary.md"
  tar -czf "$OUT/results.tar.gz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")"
}

timed() {  # timed NAME CMD...: run, log to $LOGS/NAME.log (and live to $OUT/current.log), add a summary row
  local name=$1; shift
  local start=$(date +%s)
  "$@" 2>&1 | tee "$LOGS/$name.log" > "$OUT/current.log"
  local rc=${PIPESTATUS[0]}
  local took=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then row "$name" "ok" "${took} s"; else row "$name" "FAIL (rc $rc)" "${took} s: $(tail -n 3 "$LOGS/$name.log" | tr '\n|' ' /' | cut -c1-200)"; fi
  echo "== $name rc=$rc ${took}s"; tail -n 4 "$LOGS/$name.log"
  write_summary
  return $rc
}

for stage in $STAGES; do
  case $stage in
    tests)
      TIMEOUT=$(python3 -c "import pytest_timeout" 2>/dev/null && echo "--timeout 240")
      WORKERS=$(python3 -c "import xdist" 2>/dev/null && echo "-n ${GPU_TEST_WORKERS:-8}")
      # SIGINT at the limit: pytest stops and still prints its summary, so the record says what ran
      timed pytest_gpu timeout -s INT "${GPU_TEST_LIMIT:-1800}" python3 -m pytest -q -rfE $TIMEOUT $WORKERS -p no:cacheprovider tests/test_cartpole.py tests/test_check_env.py \
        tests/test_classic_control.py tests/test_cuda_c.py tests/test_tag.py \
        tests/test_tag_cuda_c.py tests/test_tag_grid_cuda_c.py tests/test_step_graph.py tests/test_magic.py tests/test_training.py tests/test_errors.py tests/test_env_compiler.py tests/test_numpy_in_phases.py tests/test_phase_checks.py tests/test_same_meaning.py tests/test_terminal_frame.py tests/test_final_active.py tests/test_learner.py tests/test_fused.py tests/test_fused_wide.py tests/test_fused_record.py tests/test_padded_linear.py tests/test_population.py tests/test_shared_body.py tests/test_release.py tests/test_distributed.py tests/test_frozen_policies.py tests/test_reward_scale.py tests/test_policy_function.py \
        $(ls tests/test_tag_grid_search.py 2>/dev/null)
      grep -E "passed|failed" "$LOGS/pytest_gpu.log" | tail -n 1 | sed 's/^/    /'
      # The record of this run: into $OUT (this tree may be a copy; commit it from there) and docs/.
      # a copied tree may carry a stale .git: a HEAD its files differ from is marked, not recorded as theirs
      HEAD_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
      if [ "$HEAD_COMMIT" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null | head -n 1)" ]; then
        HEAD_COMMIT="$HEAD_COMMIT+changes"
      fi
      COMMIT=${WORKBENCH_COMMIT:-$HEAD_COMMIT}
      python3 bench/gpu_record.py write "$LOGS/pytest_gpu.log" --commit "$COMMIT" --device "$DEVICE" \
        --out "$OUT/gpu-record.md" --out docs/gpu-record.md > /dev/null ;;
    check)
      timed cross_check python3 bench/cross_check.py --num-envs 4096 --steps 300 --tag-num-envs 64 ;;
    sanitize)
      command -v compute-sanitizer >/dev/null || { row sanitize "FAIL" "compute-sanitizer not found"; continue; }
      i=0
      for tool in memcheck racecheck; do
        for spec in "cartpole cuda" "cartpole cuda-c" "tag_continuous cuda --param num_taggers=3 --param num_runners=40" \
                    "tag_continuous cuda --param num_taggers=40 --param num_runners=1100 --num-envs 2 --steps 10" \
                    "tag_grid cuda --param num_taggers=4 --param num_runners=60" \
                    "tag_continuous cuda-c --param num_taggers=3 --param num_runners=40" \
                    "tag_grid cuda-c --param num_taggers=4 --param num_runners=60"; do
          set -- $spec
          if [ "$2" = cuda-c ] && ! python3 -c "import sys, workbench.runtime.registry as r; sys.exit(r.lookup('$1').c_source is None)"; then continue; fi
          i=$((i + 1))
          timed "sanitize_${i}_${tool}_$1_$2" compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 3 \
            python3 bench/sanitize_env.py "$1" --target "$2" "${@:3}"
        done
      done
      # the rollout's wide policy step as built (mma.sync), every program shape
      timed sanitize_wide_step_memcheck compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
        python3 bench/sanitize_wide_step.py --mma sync ;;
    bench)
      timed bench_classic python3 bench/bench_envs.py --envs cartpole acrobot mountain_car mountain_car_continuous pendulum \
        --targets cuda --num-envs 1e3 1e4 1e5 1e6 1e7 --gym-num-envs 16 256 --out "$LOGS/bench_classic.json"
      if python3 -c "import workbench as wb, sys; sys.exit('cuda-c' not in wb.available_targets())"; then
        timed bench_cartpole_cuda_c python3 bench/bench_envs.py --envs cartpole --targets cuda-c --num-envs 1e3 1e5 1e7 \
          --gym-num-envs --out "$LOGS/bench_cartpole_cuda_c.json"
        TAG_TARGETS="cuda cuda-c"
      else
        TAG_TARGETS="cuda"
      fi
      timed bench_tag_grid python3 bench/bench_envs.py --envs tag_grid --targets $TAG_TARGETS --num-envs 2000 \
        --param num_taggers=50 --param num_runners=950 --param grid_length=100 --out "$LOGS/bench_tag_grid.json"
      for cfg in "10 100 100 1000" "40 600 2000" "50 950 100 500 1000 2000 4000" "200 3800 100" "500 9500 100"; do
        set -- $cfg; taggers=$1; runners=$2; shift 2
        for t in $TAG_TARGETS; do
          if [ "$t" = cuda-c ] && ! python3 -c "import sys, workbench.runtime.registry as r; sys.exit(r.lookup('tag_continuous').c_source is None)"; then continue; fi
          timed "bench_tag_continuous_${t}_$((taggers + runners))" python3 bench/bench_envs.py --envs tag_continuous --targets $t \
            --num-envs "$@" --param num_taggers=$taggers --param num_runners=$runners --repeats 5 --max-steps 200 \
            --out "$LOGS/bench_tag_continuous_${t}_$((taggers + runners)).json"
        done
      done
      timed bench_bandwidth python3 bench/bench_bandwidth.py --target cuda --num-envs 1e7 --out "$LOGS/bench_bandwidth.json" ;;
    learner)
      timed learner_parity python3 bench/bench_learner.py parity
      timed bench_training python3 bench/bench_training.py --target cuda --num-envs 1000 10000 100000 1000000 \
        --iterations 5 --no-compile --solve --solve-repeats 3 --out "$LOGS/bench_training.json"
      timed learner_tag python3 bench/bench_learner.py tag 100:250 1000:100 --precisions bf16 tf32
      timed learner_tag_big python3 bench/bench_learner.py big 2000:20 2000:100
      # WarpDrive's network (one body for policy and value), default settings
      timed learner_tag_shared python3 bench/bench_learner.py tag 100:250 1000:100 --no-compile --shared-body
      timed learner_tag_big_shared python3 bench/bench_learner.py big 2000:20 --no-compile --shared-body ;;
    notebooks)
      if [ -d .whl-nb ] && ls .whl-nb/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-nb \
          .whl-nb/*.whl && export PYTHONPATH=/tmp/site-nb${PYTHONPATH:+:$PYTHONPATH}
      fi
      timed notebooks_gpu python3 bench/notebook_timings.py --target cuda ;;
    population)  # populations beside PureJaxRL's jit(vmap) seeds in the same run (needs .peers/), the torch path
                 # for comparison, a Tag population against one member, and where a 1024-member iteration goes
      if [ -f .peers/side_by_side.sh ]; then timed peer_seeds env SEEDS="1 16 256 1024" bash .peers/side_by_side.sh seeds; fi
      timed population_fused python3 bench/bench_population.py --target cuda --members 1 16 256 1024 \
        --out "$LOGS/population_fused.json"
      timed population_torch python3 bench/bench_population.py --target cuda --members 256 1024 --set fused_kernels=false \
        --out "$LOGS/population_torch.json"
      timed population_tag python3 bench/bench_population.py --target cuda --tag 1 8
      timed tune_fused python3 bench/tune_fused.py --members 256 1024
      timed profile_population python3 bench/profile_iteration.py --env cartpole --num-envs 64 --rollout-length 64 \
        --seeds 1024 --no-compile --top 20 ;;
    training)  # CartPole PPO with the default settings beside PureJaxRL in the same run (needs .peers/):
               # env-steps/s at 1k to 1M replicas and seconds of training to 475
      if [ -f .peers/purejaxrl_bench.py ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/pj .peers/wheels/gymnax-*.whl \
          .peers/wheels/gymnasium-*.whl .peers/wheels/farama_notifications-*.whl > /dev/null 2>&1
        timed peer_cartpole_train env PYTHONPATH=/tmp/pj python3 .peers/purejaxrl_bench.py train 1000 10000 100000 1000000
        timed peer_cartpole_solve env PYTHONPATH=/tmp/pj python3 .peers/purejaxrl_bench.py solve
      fi
      timed training_defaults python3 bench/bench_training.py --target auto --num-envs 1000 10000 100000 1000000 \
        --iterations 5 --no-compile --solve --solve-repeats 3 --out "$LOGS/training_defaults.json" ;;
    tag_training)  # Tag continuous A2C beside WarpDrive's trainer on its shipped config in the same run (needs
                   # .peers/): WarpDrive at 100 x 110 and 1000 x 110, then ours with the default settings and its
                   # network (one ReLU body for policy and value), each size in a process of its own (its own
                   # peak memory), ours with a tanh body and with two bodies, and Tag at 2000 x 1000 agents
      if [ -f .peers/warpdrive_bench.py ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/wd .peers/wheels/rl_warp_drive-*.whl \
          .peers/wheels/gym-*.whl .peers/wheels/gym_notices-*.whl > /dev/null 2>&1
        for what in trainer trainer_big; do
          timed "peer_warpdrive_$what" env PYTHONPATH=/tmp/wd python3 -c "import numpy as np, runpy, sys; \
np.row_stack = getattr(np, 'row_stack', np.vstack); sys.argv = ['warpdrive_bench.py', '$what']; \
runpy.run_path('.peers/warpdrive_bench.py', run_name='__main__')"
        done
      fi
      for size in 100:250 1000:100; do
        timed "tag_warpdrive_network_$size" python3 bench/bench_learner.py tag "$size" --no-compile --shared-body \
          --activation relu
        timed "tag_shared_body_tanh_$size" python3 bench/bench_learner.py tag "$size" --no-compile --shared-body
        timed "tag_two_bodies_$size" python3 bench/bench_learner.py tag "$size" --no-compile
      done
      timed tag_big_warpdrive_network python3 bench/bench_learner.py big 2000:20 --no-compile --shared-body \
        --activation relu ;;
    learning)  # every shipped config with a threshold, its defaults on this GPU (the target auto picks)
      for name in cartpole acrobot mountain_car_continuous pendulum; do
        timed "learning_$name" python3 -m workbench train "configs/$name.yaml" --run-dir "$LOGS/runs/$name"
        grep -E "^stopped|reached" "$LOGS/learning_$name.log" | tail -n 1 | sed 's/^/    /'
      done ;;
    envonly)  # env-only CartPole (random actions, auto-reset) beside gymnax's jit'd scan in the same run
              # (needs .peers/): ours from Python step by step, and env.random_steps' graphs of steps
      if [ -f .peers/purejaxrl_bench.py ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/pj .peers/wheels/gymnax-*.whl \
          .peers/wheels/gymnasium-*.whl .peers/wheels/farama_notifications-*.whl > /dev/null 2>&1
        timed peer_gymnax_envonly env PYTHONPATH=/tmp/pj python3 .peers/purejaxrl_bench.py envonly 1000 10000 100000 \
          1000000 10000000
      fi
      timed envonly_graph python3 bench/bench_envs.py --envs cartpole --targets cuda cuda-c --num-envs 1e3 1e4 1e5 1e6 1e7 \
        --actions graph --gym-num-envs --out "$LOGS/envonly_graph.json"
      # (final observations at every episode end, the env's default: what the trainer does not ask for costs)
      timed envonly_graph_every_end python3 bench/bench_envs.py --envs cartpole --targets cuda-c --num-envs 1e6 1e7 \
        --actions graph --final-obs every-end --gym-num-envs --out "$LOGS/envonly_graph_every_end.json"
      timed envonly_sample python3 bench/bench_envs.py --envs cartpole --targets cuda cuda-c --num-envs 1e3 1e4 1e5 1e6 1e7 \
        --gym-num-envs --out "$LOGS/envonly_sample.json" ;;
    startup)  # a new process to its first iterations, caches warm, against torch's own import (goal: <= 5 s)
      timed startup_auto env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=/tmp/pycache python3 bench/bench_startup.py \
        --target auto --runs 3 --profile 45
      timed startup_cuda env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=/tmp/pycache python3 bench/bench_startup.py \
        --target cuda --runs 3
      timed startup_cuda_no_warm_up env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=/tmp/pycache python3 \
        bench/bench_startup.py --target cuda --runs 3 --no-warm-up
      timed startup_cuda_no_bytecode_cache env PYTHONDONTWRITEBYTECODE=1 python3 bench/bench_startup.py --target cuda --runs 3 ;;
    scaling)
      GPUS=$(python3 -c "import torch; print(torch.cuda.device_count())")
      for n in $(seq 1 "$GPUS"); do
        timed "scaling_cartpole_${n}gpu" torchrun --standalone --nproc-per-node "$n" bench/bench_distributed.py \
          --env cartpole --num-envs 100000 --out "$LOGS/scaling_cartpole_${n}.json"
        timed "scaling_tag_continuous_${n}gpu" torchrun --standalone --nproc-per-node "$n" bench/bench_distributed.py \
          --env tag_continuous --num-envs 1000 --param num_taggers=10 --param num_runners=100 \
          --out "$LOGS/scaling_tag_continuous_${n}.json"
      done ;;
    *) echo "unknown stage '$stage' (tests, check, sanitize, bench, learner, population, training, tag_training, learning, notebooks, startup, envonly, scaling)"; exit 2 ;;
  esac
done

write_summary
cat "$OUT/summary.md"
