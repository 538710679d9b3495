"""The nki-library adapter's multi-rank route: tests with `collective_ranks > 1` run every rank
through `nki.multi_rank_simulate` and leave each rank's outputs where the suite's validator reads
them (`<inference dir>/output_worker_<r>/<name>`). The harness here is our own small model of the
interface the adapter relies on (written from nki-library's test/utils, nothing copied); the real
suite's collectives run in docs/emulator.md's verification run."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path

import numpy as np
import pytest

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
from benchmarks.peer_suites import plugin
from benchmarks.peer_suites.nki_library import measure_emulator_cpu, route_multi_rank_simulation
from nki.collectives import ReplicaGroup


@nki.jit
def gather_rows(x, replica_group, ranks):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    dst = nl.ndarray((x.shape[0] * ranks, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    nisa.dma_copy(dst=src, src=x)
    ncc.all_gather(dsts=[dst], srcs=[src], replica_group=replica_group, collective_dim=0)
    return dst


@nki.jit
def own_slice(table):
    """The same input on every rank; each rank copies out the slice its rank id selects."""
    _, h, w = table.shape
    out = nl.ndarray((h, w), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=table.ap(pattern=[[w, h], [1, w]], scalar_offset=ncc.rank_id(), indirect_dim=0))
    return out


def _harness() -> types.ModuleType:
    """A model of nki-library's orchestrator module: the names the route reads."""
    h = types.ModuleType("fake_orchestrator")
    h.INF_ARTIFACT_DIR_NAME = "inference"

    class InferenceException(Exception):
        pass

    @dataclasses.dataclass
    class PerRankLazyInputGenerator:
        generator: object

        def for_rank(self, rank_id):
            return self.generator(rank_id=rank_id)

    @dataclasses.dataclass
    class PerRankLazyGoldenGenerator:
        generator: object

        def for_rank(self, rank_id):
            return self.generator(rank_id=rank_id)

    def normalize_golden_output(golden, rank_id=0):
        return golden.for_rank(rank_id) if isinstance(golden, PerRankLazyGoldenGenerator) else golden

    class Orchestrator:
        def __init__(self, out: Path):
            self.fs_config = types.SimpleNamespace(artifacts_output_directory_path=str(out))
            self.single_rank_runs = 0

        def _run_simulator_inference(self, kernel_under_test):  # the suite's one-rank path
            self.single_rank_runs += 1
            result = nki.cpu_simulate(kernel_under_test.kernel_func)[1](**kernel_under_test.kernel_input)
            path = Path(self.fs_config.artifacts_output_directory_path) / h.INF_ARTIFACT_DIR_NAME
            name = next(iter(kernel_under_test.validation_args.golden_output))
            self.__dump_tensors__(str(path), {name: result}, lambda n: n)
            return str(path)

        def __dump_tensors__(self, target_directory, tensors, name_fn):
            Path(target_directory).mkdir(parents=True, exist_ok=True)
            for name, value in tensors.items():
                (Path(target_directory) / f"{name_fn(name)}.bin").write_bytes(value.tobytes())

    h.InferenceException = InferenceException
    h.PerRankLazyInputGenerator = PerRankLazyInputGenerator
    h.PerRankLazyGoldenGenerator = PerRankLazyGoldenGenerator
    h.normalize_golden_output = normalize_golden_output
    h.Orchestrator = Orchestrator
    return h


def _kernel_args(func, kernel_input, golden, ranks, lnc=1):
    target = types.SimpleNamespace(get_nc_gen=lambda: "gen3")
    return types.SimpleNamespace(
        kernel_func=func, kernel_input=kernel_input,
        compiler_input=types.SimpleNamespace(platform_target=target, logical_nc_config=lnc),
        inference_args=types.SimpleNamespace(collective_ranks=ranks),
        validation_args=types.SimpleNamespace(golden_output=golden))


def _read(path: Path, like: np.ndarray) -> np.ndarray:
    return np.frombuffer(path.read_bytes(), dtype=like.dtype).reshape(like.shape)


@pytest.mark.parametrize("lnc", [1, 2])
def test_per_rank_inputs_run_on_every_rank_and_land_in_each_ranks_folder(tmp_path, lnc):
    h = _harness()
    route_multi_rank_simulation(h)
    ranks, rows = 4, np.arange(4 * 8 * 16, dtype=np.float32).reshape(4, 8, 16)
    group = ReplicaGroup([list(range(ranks))])
    args = _kernel_args(gather_rows, h.PerRankLazyInputGenerator(
        lambda rank_id: {"x": rows[rank_id], "replica_group": group, "ranks": ranks}),
        h.PerRankLazyGoldenGenerator(lambda rank_id: {"out": rows.reshape(ranks * 8, 16)}), ranks, lnc)
    orch = h.Orchestrator(tmp_path)
    base = Path(orch._run_simulator_inference(args))
    assert base == tmp_path / "inference" and orch.single_rank_runs == 0
    for r in range(ranks):
        np.testing.assert_array_equal(_read(base / f"output_worker_{r}" / "out.bin", rows.reshape(32, 16)),
                                      rows.reshape(32, 16))


def test_shared_inputs_run_on_every_rank_and_single_rank_tests_keep_the_suites_path(tmp_path):
    h = _harness()
    route_multi_rank_simulation(h)
    route_multi_rank_simulation(h)  # idempotent: the harness fix may run once per session and worker
    table = np.arange(2 * 4 * 8, dtype=np.float32).reshape(2, 4, 8)
    args = _kernel_args(own_slice, {"table": table},
                        h.PerRankLazyGoldenGenerator(lambda rank_id: {"out": table[rank_id]}), 2)
    orch = h.Orchestrator(tmp_path)
    base = Path(orch._run_simulator_inference(args))
    for r in range(2):
        np.testing.assert_array_equal(_read(base / f"output_worker_{r}" / "out.bin", table[r]), table[r])
    one = _kernel_args(own_slice, {"table": table}, {"out": table[0]}, 1)
    assert Path(orch._run_simulator_inference(one)) == base and orch.single_rank_runs == 1


def test_a_failing_rank_is_the_suites_inference_error(tmp_path):
    h = _harness()
    route_multi_rank_simulation(h)
    rows = np.zeros((2, 8, 16), dtype=np.float32)
    wrong_group = ReplicaGroup([[0, 1, 2]])  # names a rank the world of 2 does not have
    args = _kernel_args(gather_rows, h.PerRankLazyInputGenerator(
        lambda rank_id: {"x": rows[rank_id], "replica_group": wrong_group, "ranks": 2}),
        h.PerRankLazyGoldenGenerator(lambda rank_id: {"out": rows.reshape(16, 16)}), 2)
    with pytest.raises(h.InferenceException):
        h.Orchestrator(tmp_path)._run_simulator_inference(args)


def test_the_suites_kernel_launch_counts_as_the_emulators_cpu_time():
    # nki-library's simulation path launches every single-rank kernel through
    # test.utils.simulation_setup.simulate_kernel; the adapter times it (arguments and result unchanged)
    import time

    setup = types.ModuleType("fake_simulation_setup")

    def simulate_kernel(kernel_func, kernel_input, lnc_count):
        start = time.process_time()
        while time.process_time() - start < 0.2:
            pass
        return [nki.cpu_simulate(kernel_func)[lnc_count](**kernel_input)]

    setup.simulate_kernel = simulate_kernel
    measure_emulator_cpu(setup)
    measure_emulator_cpu(setup)  # idempotent: the harness fix runs once per session and worker
    plugin.add_emulator_cpu(-plugin._emulator_cpu[0])  # start from zero
    table = np.arange(2 * 4 * 8, dtype=np.float32).reshape(2, 4, 8)
    (out,) = setup.simulate_kernel(own_slice, {"table": table}, 1)
    np.testing.assert_array_equal(out, table[0])
    assert 0.2 <= plugin._emulator_cpu[0] < 5.0  # counted once, not once per wrapper
