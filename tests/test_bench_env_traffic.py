"""bench/bench_env_traffic.py: the minimum bytes of a step, scratch arrays told from state, ncu's CSV, a cpu run."""
import importlib.util
import json
from pathlib import Path

import pytest

import workbench as wb

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("bench_env_traffic", ROOT / "bench" / "bench_env_traffic.py")
traffic = importlib.util.module_from_spec(spec)
spec.loader.exec_module(traffic)

# the parameters of the Tag C-twin tests: their cpu kernels compile once for both files
from test_tag_cuda_c import TAG as TAG_CONTINUOUS  # noqa: E402
from test_tag_grid_cuda_c import SHARED as TAG_GRID  # noqa: E402


def roles(rows) -> dict:
    return {row["array"]: row["role"] for row in rows}


def test_cartpole_minimum_is_the_closed_form_of_its_store():
    env = wb.make("cartpole", num_envs=4, target="cpu", seed=0)

    def size(name):  # bytes of one replica's entry, from the store's dtype and shape
        tensor = env.store[name]
        return tensor.element_size() * tensor[0].numel()

    state = ("x", "x_dot", "theta", "theta_dot")
    expected = (2 * sum(size(k) for k in state)  # state read and written
                + size("action")  # read
                + size("reward") + size("terminated") + size("truncated")  # written
                + 2 * (size("t") + size("last_return") + size("done")))  # clock, return and done read and written
    # float32 state 4 x 4 B x 2 = 32, int8 action 1, float32 reward 4, terminated/truncated uint8 2,
    # int32 t 2 x 4 = 8, float32 last_return 2 x 4 = 8, uint8 done 2 x 1 = 2; the observation (4 x float32)
    # is the state
    assert [size(k) for k in state] == [4, 4, 4, 4] and size("obs") == 16 and size("done") == 1
    assert size("action") == 1 and expected == 57
    rows = traffic.probe_arrays("cartpole", {})
    assert traffic.minimum_bytes(rows) == expected
    assert {k for k, role in roles(rows).items() if role == "state"} == set(state)
    assert roles(rows)["final_obs"] == "episode end" and roles(rows)["last_length"] == "episode end"
    assert roles(rows)["obs"] == "the state"


def test_tag_grid_blocks_are_scratch_and_positions_state():
    rows = traffic.probe_arrays("tag_grid", TAG_GRID)
    kinds = roles(rows)
    assert kinds["blocks"] == "scratch"
    assert kinds["x"] == "state" and kinds["y"] == "state"
    moved = {row["array"]: row["moved"] for row in rows}
    agents = TAG_GRID["num_taggers"] + TAG_GRID["num_runners"]
    assert moved["blocks"] == 0 and moved["x"] == 2 * 4 * agents  # int32 per agent, read and written


def test_tag_continuous_grid_arrays_are_scratch_and_positions_state():
    kinds = roles(traffic.probe_arrays("tag_continuous", TAG_CONTINUOUS))
    assert kinds["cell_count"] == kinds["cell_members"] == kinds["grid_slot"] == "scratch"
    assert kinds["x"] == "state" and kinds["y"] == "state"


NCU_CSV = '''\
==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "wb_step": 0%....50%....100% - 1 pass
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC",\
"Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3.12","127.0.0.1","wb_step","1","7","(128, 1, 1)","(7813, 1, 1)","0","9.0",\
"Command line profiler metrics","dram__bytes_read.sum","Mbyte","1,234.56"
"0","4242","python3.12","127.0.0.1","wb_step","1","7","(128, 1, 1)","(7813, 1, 1)","0","9.0",\
"Command line profiler metrics","dram__bytes_write.sum","Kbyte","512"
"0","4242","python3.12","127.0.0.1","wb_step","1","7","(128, 1, 1)","(7813, 1, 1)","0","9.0",\
"Command line profiler metrics","gpu__time_duration.sum","usecond","1,002.50"
"1","4242","python3.12","127.0.0.1","distribution_elementwise_grid_stride_kernel","1","7","(256, 1, 1)",\
"(1024, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","96"
"1","4242","python3.12","127.0.0.1","distribution_elementwise_grid_stride_kernel","1","7","(256, 1, 1)",\
"(1024, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","Gbyte","0.004"
"1","4242","python3.12","127.0.0.1","distribution_elementwise_grid_stride_kernel","1","7","(256, 1, 1)",\
"(1024, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","2,048"
==PROF== Disconnected from process 4242
'''


def test_ncu_csv_is_parsed_with_units_and_thousands_separators():
    text = NCU_CSV
    launches = traffic.parse_ncu_csv(text)
    assert [launch["kernel"] for launch in launches] == ["wb_step", "distribution_elementwise_grid_stride_kernel"]
    step, draw = launches
    assert step["id"] == 0 and draw["id"] == 1
    assert step["read"] == pytest.approx(1234.56e6)
    assert step["written"] == pytest.approx(512e3)
    assert step["ns"] == pytest.approx(1002.5e3)
    assert draw["read"] == pytest.approx(96)
    assert draw["written"] == pytest.approx(4e6)
    assert draw["ns"] == pytest.approx(2048)
    assert traffic.parse_ncu_csv("==PROF== no kernels were profiled\n") == []
    with pytest.raises(ValueError, match="furlong"):
        traffic.parse_ncu_csv(text.replace('"usecond"', '"furlong"'))


def test_param_items_are_read_per_env():
    assert traffic.env_params(["tag_grid:grid_length=50", "tag_grid:wall_hit_penalty=0.5", "pendulum:dt=0.1"]) == \
        {"tag_grid": {"grid_length": 50, "wall_hit_penalty": 0.5}, "pendulum": {"dt": 0.1}}
    with pytest.raises(SystemExit, match="ENV:KEY=VALUE"):
        traffic.env_params(["grid_length=50"])


def test_cpu_run_writes_json(tmp_path, capsys):
    out = tmp_path / "traffic.json"
    assert traffic.main(["--envs", "cartpole", "--targets", "cpu", "--num-envs", "64", "--repeats", "1",
                         "--min-time", "0.01", "--copy-mib", "4", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert {"bench", "machine", "args", "copy", "envs", "results"} <= set(report)
    assert report["bench"] == "env_traffic"
    assert report["envs"]["cartpole"]["min_bytes_per_replica_step"] == 57
    (row,) = report["results"]
    assert "error" not in row, row
    assert {"env", "target", "num_envs", "min_bytes_per_replica_step", "launches", "random_steps_launches", "dram",
            "s_per_step", "env_steps_per_s", "min_bytes_per_s", "min_share_of_copy"} <= set(row)
    assert row["launches"] is None and row["dram"] is None  # not applicable on cpu
    assert row["min_bytes_per_s"] == pytest.approx(57 * 64 / row["s_per_step"])
    printed = capsys.readouterr().out
    assert "| cartpole | cpu | 64 | 57 | n/a |" in printed
