"""This host's GPUs as they really are, on the fake NVML (no GPU here): discovery of real
machine shapes, UUIDs in CUDA_VISIBLE_DEVICES, the nvidia-smi fallback, health findings, and
the runtime draining a sick GPU."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from service_support import BASE_CONFIG, OPS, Server, job_log, job_state, wait_for
from test_runtime import CONFIG, Clock, FakeLauncher, request

from caldera.model import JobState
from caldera.service.config import ConfigError, parse_config
from caldera.service.gpus import SHAPES, FakeNvml, HostGPUs, local_node
from caldera.service.gpus.fake import FakeGpu, FakeMig, fake_uuid
from caldera.service.gpus.health import (
    Finding,
    HealthSettings,
    NvmlHealth,
    Recovered,
    Severity,
    SmiHealth,
    xid_severity,
)
from caldera.service.gpus.host import detect
from caldera.service.gpus.inventory import gpu_model, mig_profile
from caldera.service.gpus.metrics import GPU_METRICS, GpuCollector
from caldera.service.gpus.smi import QUERY, discover_smi
from caldera.service.gpus.watch import GpuWatch
from caldera.service.metrics import ServiceMetrics
from caldera.service.runtime import Runtime
from caldera.service.store import Store, database_url_for

CALDERA = str(Path(sys.executable).parent / "caldera")


# -- discovery ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    name: str
    want_whole: int
    want_island: int
    want_islands: tuple[tuple[int, ...], ...]
    want_links: str
    want_model: str
    want_mig: dict[int, tuple[str, ...]]
    want_lost: tuple[int, ...] = ()


SHAPE_CASES = [
    Shape("h100-sxm", 8, 8, ((0, 1, 2, 3, 4, 5, 6, 7),), "nvlink", "H100", {}),
    Shape("pcie-4+4", 8, 4, ((0, 1, 2, 3), (4, 5, 6, 7)), "pcie", "L40S", {}),
    Shape(
        "a100-mig",
        4,
        4,
        ((4, 5, 6, 7),),
        "nvlink",
        "A100",
        {
            0: ("1g.10gb",) * 7,
            1: ("1g.10gb",) * 7,
            2: ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"),
            3: ("3g.40gb", "3g.40gb"),
        },
    ),
    Shape("h100-lost", 7, 7, ((0, 1, 2, 3, 4, 6, 7),), "nvlink", "H100", {}, (5,)),
]


@pytest.mark.parametrize("case", SHAPE_CASES, ids=[c.name for c in SHAPE_CASES])
def test_discovery_of_real_machine_shapes(case: Shape) -> None:
    fake = SHAPES[case.name]()
    node, host = local_node(nvml=fake)
    inventory = host.inventory
    assert inventory.source == "fake" and inventory.driver == fake.driver
    assert (node.gpus, node.island_size, node.gpu_model) == (
        case.want_whole,
        case.want_island,
        case.want_model,
    )
    assert (inventory.islands, inventory.links) == (case.want_islands, case.want_links)
    assert {g.index: tuple(s.profile for s in g.slices) for g in inventory.gpus if g.mig} == (
        case.want_mig
    )
    assert tuple(g.index for g in inventory.lost) == case.want_lost
    # Every MIG slice has its own MIG-… UUID; every whole device its GPU-… UUID.
    for gpu in inventory.gpus:
        assert all(s.uuid.startswith("MIG-") for s in gpu.slices)
        assert gpu.lost or gpu.uuid.startswith("GPU-")
    assert all(uuid.startswith("GPU-") for uuid in host.ids[: node.gpus])
    assert all(uuid.startswith("MIG-") for uuid in host.ids[node.gpus :])
    assert len(set(host.ids)) == node.devices == node.gpus + sum(map(len, case.want_mig.values()))


def test_a_gpu_in_mig_mode_is_never_a_whole_device_but_its_slices_are() -> None:
    node, host = local_node(nvml=SHAPES["a100-mig"]())
    assert host.describe() == "4 GPU(s), 20 MIG slice(s) (fake)"
    assert local_node(nvml=SHAPES["h100-lost"]())[1].describe() == "7 GPU(s), 1 lost (fake)"
    assert host.physical[:4] == (4, 5, 6, 7) and node.gpus == 4
    mig_uuids = {g.uuid for g in host.inventory.gpus if g.mig}
    assert not mig_uuids & set(host.ids)
    # The slices follow, GPU by GPU: their profiles in the node, their MIG UUIDs here.
    slices = [(g.index, s) for g in host.inventory.gpus if g.mig for s in g.slices]
    assert node.slices == tuple(s.profile for _, s in slices) and len(node.slices) == 20
    assert host.ids[4:] == tuple(s.uuid for _, s in slices)
    assert host.physical[4:] == tuple(i for i, _ in slices)
    assert host.devices_of(2) == (18, 19, 20, 21)  # the all-balanced GPU's four slices
    assert [host.instance_of(d) for d in host.devices_of(2)] == [2, 5, 13, 14]


def test_cuda_visible_devices_carries_the_uuids_of_the_placed_devices() -> None:
    # NVLink bridges join GPUs 0+2 and 1+3: the node lays islands out consecutively, so
    # node device 1 is physical GPU 2. CUDA_VISIBLE_DEVICES names the UUID, never "1".
    fake = FakeNvml([FakeGpu("NVIDIA A100-PCIE-40GB", 40960) for _ in range(4)], [(0, 2), (1, 3)])
    node, host = local_node(nvml=fake)
    assert host.inventory.islands == ((0, 2), (1, 3))
    assert (node.gpus, node.island_size, host.physical) == (4, 2, (0, 2, 1, 3))
    assert host.visible((0, 1)) == f"{fake.gpus[0].uuid},{fake.gpus[2].uuid}"


def test_uneven_islands_never_join_two_real_ones() -> None:
    links = [(0, 1), (1, 2), (2, 3), (4, 5)]  # an island of 4 and one of 2
    fake = FakeNvml([FakeGpu("NVIDIA H100 80GB HBM3", 81559) for _ in range(6)], links)
    node, host = local_node(nvml=fake)
    assert node.island_size == 2  # gcd: [0,1] [2,3] [4,5], none across real islands
    assert host.physical == (0, 1, 2, 3, 4, 5)


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("Tesla V100-SXM2-32GB", "V100"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        ("", "GPU"),
    ],
)
def test_model_names(name: str, want: str) -> None:
    assert gpu_model(name) == want


def test_mig_profile_from_the_device_name() -> None:
    assert mig_profile("NVIDIA A100-SXM4-80GB MIG 1g.10gb") == "1g.10gb"
    assert mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me") == "1g.10gb+me"
    assert mig_profile("NVIDIA A100-SXM4-80GB") == ""


def test_no_driver_and_no_nvidia_smi_means_no_gpus() -> None:
    inventory, library = detect(run=lambda argv: None, use_nvml=False)
    assert (inventory.gpus, inventory.source, library) == ((), "none", None)
    node, host = local_node(0)
    assert (node.gpus, host.source) == (0, "virtual")


# -- the nvidia-smi fallback -------------------------------------------------------------------

A100_SMI = {
    tuple(QUERY): (
        "0, GPU-aaaaaaaa-0000-0000-0000-000000000000, NVIDIA A100-SXM4-80GB, 81920, Enabled\n"
        "1, GPU-aaaaaaaa-0000-0000-0000-000000000001, NVIDIA A100-SXM4-80GB, 81920, Disabled\n"
        "2, GPU-aaaaaaaa-0000-0000-0000-000000000002, NVIDIA A100-SXM4-80GB, 81920, Disabled\n"
        "3, GPU-aaaaaaaa-0000-0000-0000-000000000003, NVIDIA A100-SXM4-80GB, 81920, Disabled\n"
    ),
    ("-L",): (
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-aaaaaaaa-0000-0000-0000-000000000000)\n"
        "  MIG 3g.40gb     Device  0: (UUID: MIG-bbbbbbbb-0000-0000-0000-000000000000)\n"
        "  MIG 1g.10gb     Device  1: (UUID: MIG-bbbbbbbb-0000-0000-0000-000000000001)\n"
        "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-aaaaaaaa-0000-0000-0000-000000000001)\n"
        "GPU 2: NVIDIA A100-SXM4-80GB (UUID: GPU-aaaaaaaa-0000-0000-0000-000000000002)\n"
        "GPU 3: NVIDIA A100-SXM4-80GB (UUID: GPU-aaaaaaaa-0000-0000-0000-000000000003)\n"
    ),
    ("topo", "-m"): (
        "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\x1b[0m\n"
        "GPU0\t X \tSYS\tSYS\tSYS\t0-63\t0\n"
        "GPU1\tSYS\t X \tNV12\tPXB\t0-63\t0\n"
        "GPU2\tSYS\tNV12\t X \tSYS\t64-127\t1\n"
        "GPU3\tPXB\tSYS\tSYS\t X \t64-127\t1\n"
        "\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n"
    ),
}


def test_nvidia_smi_fallback_reads_devices_mig_and_nvlink() -> None:
    inventory = discover_smi(lambda argv: A100_SMI.get(tuple(argv)))
    assert inventory is not None and inventory.source == "nvidia-smi"
    first = inventory.gpus[0]
    assert first.mig and [(s.profile, s.uuid[-1]) for s in first.slices] == [
        ("3g.40gb", "0"),
        ("1g.10gb", "1"),
    ]
    # NVLink between 1 and 2 wins over the PCIe switch between 1 and 3.
    assert (inventory.islands, inventory.links) == (((1, 2), (3,)), "nvlink")


def test_nvidia_smi_on_the_path_is_used_without_nvml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = tmp_path / "nvidia-smi"
    tool.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        "  --query-gpu=*) echo '0, GPU-1, NVIDIA H100 80GB HBM3, 81559, [N/A]'\n"
        "                 echo '1, GPU-2, NVIDIA H100 80GB HBM3, 81559, [N/A]' ;;\n"
        "  topo) printf '\\tGPU0\\tGPU1\\nGPU0\\t X \\tNV18\\nGPU1\\tNV18\\t X \\n' ;;\n"
        "  *) exit 1 ;;\n"
        "esac\n"
    )
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    inventory, library = detect(use_nvml=False)
    node, host = local_node(None)
    assert library is None and inventory.source == "nvidia-smi"
    assert (node.gpus, node.gpu_model, node.gpu_memory, node.island_size) == (2, "H100", 81559, 2)
    assert host.visible((1, 0)) == "GPU-2,GPU-1"


def test_no_driver_means_no_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    node, host = local_node(None)
    assert (node.gpus, host.source) == (0, "none")


# -- health ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("xid", "want"),
    [
        (13, Severity.IGNORED),  # graphics engine exception: the application's fault
        (31, Severity.IGNORED),  # GPU memory page fault: the application's fault
        (43, Severity.IGNORED),
        (48, Severity.FATAL),  # double-bit ECC
        (63, Severity.DRAIN),  # row remapping pending: drain, reset later
        (79, Severity.FATAL),  # fallen off the bus
        (94, Severity.DRAIN),  # contained ECC error
        (95, Severity.FATAL),  # uncontained ECC error
    ],
)
def test_xid_severity(xid: int, want: Severity) -> None:
    assert xid_severity(xid, HealthSettings()) is want


def findings(changes: list[Finding | Recovered]) -> list[tuple[int, str, str]]:
    return [
        (c.gpu, c.reason, c.severity.value if isinstance(c, Finding) else "recovered")
        for c in changes
    ]


def test_nvml_health_findings() -> None:
    fake = SHAPES["h100-sxm"]()
    fake.ecc(6, 3)  # errors from before the service started are history
    _, host = local_node(nvml=fake)
    health = NvmlHealth(fake, host.inventory.gpus, HealthSettings())
    fake.events.clear()
    assert health.poll() == []
    fake.xid(1, 13)
    fake.xid(2, 63)
    fake.heat(3, 93)
    fake.ecc(4, 1)
    fake.lose(5)
    assert sorted(findings(health.poll())) == [
        (2, "XID 63", "drain"),
        (3, "temperature 93 °C (limit 90 °C)", "drain"),
        (4, "double-bit ECC error (uncorrected count 1)", "fatal"),
        (5, "GPU is lost", "fatal"),
        (5, "XID 79", "fatal"),  # it said goodbye before it fell off the bus
    ]
    assert health.readings[1].xids == {13: 1}  # seen and counted, the GPU stays healthy
    assert health.poll() == []  # nothing new: nothing reported twice
    fake.heat(3, 85)
    assert health.poll() == []  # still above the resume temperature
    fake.heat(3, 70)
    assert findings(health.poll()) == [(3, "cooled to 70 °C", "recovered")]


def test_nvidia_smi_health_sees_heat_ecc_and_a_vanished_gpu() -> None:
    inventory = discover_smi(lambda argv: A100_SMI.get(tuple(argv)))
    assert inventory is not None
    rows = {0: "0, 40, 0", 1: "1, 41, 2", 2: "2, 42, 0", 3: "3, 43, 0"}
    health = SmiHealth(inventory.gpus, HealthSettings(), run=lambda argv: "\n".join(rows.values()))
    assert health.poll() == []
    rows[1] = "1, 95, 3"
    del rows[3]  # no longer listed: lost
    assert sorted(findings(health.poll())) == [
        (1, "double-bit ECC error (uncorrected count 3)", "fatal"),
        (1, "temperature 95 °C (limit 90 °C)", "drain"),
        (3, "GPU is lost", "fatal"),
    ]


def test_an_xid_naming_a_mig_instance_drains_that_slice_only() -> None:
    fake = FakeNvml(
        [
            FakeGpu(
                "NVIDIA A100-SXM4-80GB",
                81920,
                mig_capable=True,
                mig=[FakeMig("3g.40gb", 40192, 1), FakeMig("3g.40gb", 40192, 2)],
            )
        ]
    )
    _, host = local_node(nvml=fake)
    health = NvmlHealth(fake, host.inventory.gpus, HealthSettings())
    fake.xid(0, 94, gpu_instance=2, compute=0)
    (finding,) = health.poll()
    assert isinstance(finding, Finding) and finding.gpu_instance == 2
    fake.xid(0, 79, gpu_instance=2, compute=0)  # fatal: the whole GPU, whoever noticed
    (finding,) = health.poll()
    assert isinstance(finding, Finding) and finding.gpu_instance is None


def test_health_settings_come_from_the_config() -> None:
    config = parse_config({**CONFIG, "gpu_health": {"max_temperature": 85, "interval": 2}})
    assert config.gpu_health == HealthSettings(interval=2, max_temperature=85)
    assert parse_config({**CONFIG, "gpu_health": {"enabled": False}}).gpu_health is None
    with pytest.raises(ConfigError, match="resume_temperature must be below"):
        parse_config({**CONFIG, "gpu_health": {"max_temperature": 70}})


# -- the runtime drains a sick GPU -------------------------------------------------------------


@dataclass
class FakeHost:
    """A runtime on a fake NVML, with the in-memory launcher and a fake clock."""

    runtime: Runtime
    launcher: FakeLauncher
    clock: Clock
    fake: FakeNvml
    host: HostGPUs
    store: Store

    def world(self) -> tuple[Runtime, FakeLauncher, Clock, FakeNvml, HostGPUs]:
        return self.runtime, self.launcher, self.clock, self.fake, self.host

    def again(self) -> Runtime:
        """A second server on the same database (a restart)."""
        config = self.runtime.config
        nodes = self.runtime.nodes
        runtime = Runtime(config, self.store, self.runtime.data_dir, nodes, self.launcher,
                          self.clock, host=self.host)  # fmt: skip
        runtime.recover()
        return runtime


def fake_host(tmp_path: Path, fake: FakeNvml, **config: Any) -> FakeHost:
    store = Store(database_url_for(tmp_path))
    store.migrate()
    launcher, clock = FakeLauncher(), Clock()
    node, host = local_node(nvml=fake)
    parsed = parse_config({**CONFIG, "gpu_health": {"interval": 1}, **config})
    watch = GpuWatch.for_host(host, parsed.gpu_health)
    runtime = Runtime(parsed, store, tmp_path, (node,), launcher, clock, host=host, gpu_watch=watch)
    runtime.recover()
    return FakeHost(runtime, launcher, clock, fake, host, store)


@pytest.fixture
def sick_world(tmp_path: Path) -> Any:
    world = fake_host(tmp_path, SHAPES["h100-sxm"]())
    yield world.world()
    world.store.close()


def placed_gpus(runtime: Runtime, job_id: str) -> set[int]:
    return {d for t in runtime.jobs[job_id].running for d in t.placement.devices}


def test_a_gpu_reporting_an_xid_error_is_drained_and_its_job_moves_gracefully(
    sick_world: Any,
) -> None:
    runtime, launcher, clock, fake, host = sick_world
    job_id = runtime.submit(request(gpu=2000, name="train"), "ops")["id"]
    runtime.cycle()
    (launch,) = launcher.launches
    devices = sorted(placed_gpus(runtime, job_id))
    # The job sees exactly its devices, by UUID.
    assert launch.env["CUDA_VISIBLE_DEVICES"] == host.visible(devices)
    assert launch.env["CUDA_VISIBLE_DEVICES"].startswith("GPU-")
    sick = host.physical[devices[0]]
    fake.xid(sick, 63)
    clock.now += 2
    runtime.step()
    job = runtime.jobs[job_id]
    assert job.state is JobState.RELEASING and job.evictions == 0  # not a preemption
    assert launcher.signals == [(1001, signal.SIGTERM)]  # graceful: SIGTERM, grace period
    assert all(t.kill_at == clock.now + 10 for t in job.tasks)
    drains = runtime.store.events_of_kind("gpu_drain")
    assert [(e["data"]["uuid"], e["data"]["reason"]) for e in drains] == [
        (fake.gpus[sick].uuid, "XID 63")
    ]
    (evict,) = runtime.store.events_of_kind("evict")
    assert (evict["data"]["reason"], evict["data"]["gpu"]) == ("health", fake.gpus[sick].uuid)
    # Its process exits (checkpoint written): requeued, and restarted away from the sick GPU.
    launcher.exits[1001] = 0
    clock.now += 1
    runtime.step()
    runtime.cycle()
    assert job.state is JobState.RUNNING and job.attempts == 2
    assert devices[0] not in placed_gpus(runtime, job_id)
    # No new work lands on the drained GPU, however much is asked.
    others = [runtime.submit(request(gpu=1000, name=f"n{i}"), "ops")["id"] for i in range(7)]
    runtime.cycle()
    running = [o for o in others if runtime.jobs[o].state is JobState.RUNNING]
    assert len(running) == 5  # 8 GPUs, 1 drained, 2 taken by the moved job
    assert all(devices[0] not in placed_gpus(runtime, o) for o in running)


def test_a_fatal_error_stops_the_job_at_once(sick_world: Any) -> None:
    runtime, launcher, clock, fake, _ = sick_world
    job_id = runtime.submit(request(gpu=8000, type="critical", queue="ops"), "ops")["id"]
    runtime.cycle()
    fake.lose(3)
    clock.now += 2
    runtime.step()
    job = runtime.jobs[job_id]
    # Even a critical job leaves a dead GPU; no grace period: SIGKILL on the next look.
    assert job.state is JobState.RELEASING
    runtime.step()
    assert (1001, signal.SIGKILL) in launcher.signals
    assert runtime.stats.refused_evictions == 0
    metrics = ServiceMetrics()
    metrics.attach(runtime)
    text = metrics.render().decode()
    assert "caldera_critical_preempted 0.0" in text  # a dead GPU is no preemption
    assert 'reason="health"' not in text


def test_a_hot_gpu_comes_back_once_it_cooled(sick_world: Any) -> None:
    runtime, _, clock, fake, _ = sick_world
    fake.heat(0, 95)
    clock.now += 2
    runtime.step()
    others = [runtime.submit(request(gpu=1000, name=f"n{i}"), "ops")["id"] for i in range(8)]
    runtime.cycle()
    assert sum(runtime.jobs[o].state is JobState.RUNNING for o in others) == 7
    fake.heat(0, 60)
    clock.now += 2
    runtime.step()
    runtime.cycle()
    assert sum(runtime.jobs[o].state is JobState.RUNNING for o in others) == 8
    assert len(runtime.store.events_of_kind("gpu_restore")) == 1


def test_gpu_health_metrics(sick_world: Any) -> None:
    runtime, _, clock, fake, host = sick_world
    registry = CollectorRegistry()
    registry.register(GpuCollector(host, runtime.gpu_watch, runtime.lock))
    fake.xid(2, 79)
    fake.lose(2)
    clock.now += 2
    runtime.step()
    text = generate_latest(registry).decode()
    for name in GPU_METRICS:
        assert f"# TYPE {name} " in text, name
    uuid = fake.gpus[2].uuid
    assert "caldera_gpus_available 7.0" in text and "caldera_gpus_lost 1.0" in text
    assert f'caldera_gpu_healthy{{gpu="2",model="H100",uuid="{uuid}"}} 0.0' in text
    assert f'caldera_gpu_healthy{{gpu="1",model="H100",uuid="{fake.gpus[1].uuid}"}} 1.0' in text
    assert f'caldera_gpu_xid_errors_total{{gpu="2",model="H100",uuid="{uuid}",xid="79"}}' in text


def test_fake_gpus_follow_a_json_file(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    path.write_text('{"shape": "h100-sxm"}')
    fake = FakeNvml.named(str(path))
    _, host = local_node(nvml=fake)
    health = NvmlHealth(fake, host.inventory.gpus, HealthSettings())
    assert health.poll() == []
    path.write_text('{"shape": "h100-sxm", "xids": [{"gpu": 4, "xid": 74}]}')
    os.utime(path, (1, 1))  # a new mtime, whatever the file system's resolution
    assert findings(health.poll()) == [(4, "XID 74", "fatal")]
    assert fake_uuid("GPU", "h100-sxm", 4) == host.inventory.gpus[4].uuid


def test_serve_refuses_an_unknown_fake_shape(tmp_path: Path) -> None:
    done = subprocess.run(
        [CALDERA, "serve", "--fake-gpus", "b200-nvl72", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "neither a shape" in done.stderr and len(done.stderr.strip().splitlines()) == 1


# -- end to end: a real server on a fake NVML ------------------------------------------------

WAITS_FOR_SIGTERM = (
    "trap 'echo got SIGTERM; exit 0' TERM; echo on $CUDA_VISIBLE_DEVICES; "
    "while true; do sleep 0.1; done"
)


@pytest.fixture
def fake_server(tmp_path: Path) -> Any:
    gpus = tmp_path / "gpus.json"
    gpus.write_text(json.dumps({"shape": "h100-sxm"}))
    config = {**BASE_CONFIG, "gpu_health": {"interval": 0.2}}
    server = Server(tmp_path, None, config, gpu_args=("--fake-gpus", str(gpus)))
    server.start()
    yield server, gpus
    server.stop()
    server.kill_tasks()
    server.close_clients()


def test_the_service_drains_a_gpu_that_reports_an_xid_error(fake_server: Any) -> None:
    server, gpus = fake_server
    job = server.cli("submit", "--queue", "team-a", "--", "sh", "-c", WAITS_FOR_SIGTERM)
    job_id = job.stdout.strip()
    wait_for("the job to run", lambda: "on GPU-" in job_log(server, job_id))
    (task,) = server.client(OPS).get(job_id)["placement"]
    (device,) = task["devices"]
    uuid = fake_uuid("GPU", "h100-sxm", device)  # h100-sxm: device d is NVML GPU d
    assert f"on {uuid}\n" in job_log(server, job_id)

    gpus.write_text(json.dumps({"shape": "h100-sxm", "xids": [{"gpu": device, "xid": 63}]}))
    os.utime(gpus, (1, 1))
    wait_for("SIGTERM", lambda: "got SIGTERM" in job_log(server, job_id))
    wait_for("the job to run again", lambda: job_state(server, job_id) == "Running")
    (task,) = server.client(OPS).get(job_id)["placement"]
    assert task["devices"] != [device]

    queues = server.cli("queues", token=OPS).stdout
    assert "GPUs: 7 of 8 healthy" in queues
    assert f"drained: {task['node']} GPU {device} {uuid} — XID 63 (drain)" in queues
    status = server.cli("status", job_id, token=OPS).stdout
    assert "moved off GPU: " in status and f"{uuid}: XID 63" in status
    metrics = server.client(OPS).metrics()
    assert f'caldera_gpu_drained{{gpu="{device}",model="H100",reason="XID 63"' in metrics
    assert "caldera_gpus_available 7.0" in metrics
    server.cli("cancel", job_id, token=OPS)


# -- time-sharing ------------------------------------------------------------------------------


def test_a_time_sharing_queue_puts_two_tasks_on_one_gpu_and_says_so(tmp_path: Path) -> None:
    fake = SHAPES["h100-sxm"]()
    fake.gpus = fake.gpus[:1]  # one GPU
    world = fake_host(tmp_path, fake, queues=[{"name": "dev", "time_sharing": 2}])
    runtime, launcher, clock, store = world.runtime, world.launcher, world.clock, world.store
    ids = [
        runtime.submit(request(queue="dev", gpu=1000, name=f"d{i}"), "ops")["id"] for i in range(2)
    ]
    clock.now += 1  # later: it ranks after them
    gang = runtime.submit(request(queue="dev", tasks=2, gpu=1000, name="gang"), "ops")["id"]
    runtime.cycle()
    assert [runtime.jobs[i].state for i in ids] == [JobState.RUNNING] * 2
    assert runtime.jobs[gang].state is JobState.PENDING and runtime.jobs[gang].spec.gpu == 1000
    for launch in launcher.launches:
        assert launch.env["CUDA_VISIBLE_DEVICES"] == fake.gpus[0].uuid  # the same whole GPU
        assert (launch.env["CALDERA_TIME_SHARED"], launch.env["CALDERA_GPU_FRACTION"]) == (
            "2",
            "0.5",
        )
    # The request keeps it, so a restarted server rebuilds the same job.
    row = store.job(ids[0])
    assert row is not None and row["request"]["time_shared"] == 2
    again = world.again()
    assert again.jobs[ids[0]].spec.time_shared == 2 and again.jobs[ids[0]].spec.gpu == 500
    store.close()


# -- MIG slices in the service -----------------------------------------------------------------


@pytest.fixture
def mig_world(tmp_path: Path) -> Any:
    world = fake_host(tmp_path, SHAPES["a100-mig"]())
    yield world.world()
    world.store.close()


def test_a_job_asking_for_a_profile_gets_a_slice_by_its_mig_uuid(mig_world: Any) -> None:
    runtime, launcher, _, fake, _ = mig_world
    request_3g = request(gpu=428, gpu_profile="3g.40gb", tasks=2, min_available=2)
    job_id = runtime.submit(request_3g, "ops")["id"]
    whole = runtime.submit(request(gpu=2000, name="whole"), "ops")["id"]
    runtime.cycle()
    assert runtime.jobs[job_id].state is JobState.RUNNING
    seen = {launch.job: [] for launch in launcher.launches}
    for launch in launcher.launches:
        seen[launch.job].append(launch.env["CUDA_VISIBLE_DEVICES"])
    three_g = {s.uuid for g in fake.gpus if g.mig for s in g.mig if s.profile == "3g.40gb"}
    assert len(seen[job_id]) == 2 and set(seen[job_id]) <= three_g  # two distinct slices
    assert len(set(seen[job_id])) == 2
    assert all(v.count("GPU-") == 2 and "MIG-" not in v for v in seen[whole])
    # The stored request keeps the profile: a restarted server rebuilds the same job.
    assert runtime.store.job(job_id)["request"]["gpu_profile"] == "3g.40gb"


def test_an_xid_on_one_mig_instance_moves_only_the_job_on_that_slice(mig_world: Any) -> None:
    runtime, _, clock, fake, host = mig_world
    ids = [
        runtime.submit(request(gpu=142, gpu_profile="1g.10gb", name=f"s{i}"), "ops")["id"]
        for i in range(2)
    ]
    runtime.cycle()
    (first,) = runtime.jobs[ids[0]].running
    device = first.placement.devices[0]
    gpu, instance = host.physical[device], host.instance_of(device)
    fake.xid(gpu, 94, gpu_instance=instance, compute=0)  # a contained ECC error
    clock.now += 2
    runtime.step()
    assert runtime.jobs[ids[0]].state is JobState.RELEASING
    assert runtime.jobs[ids[1]].state is JobState.RUNNING  # the other slice is fine
    assert set(runtime.gpu_watch.sick) == {device}


def test_the_service_runs_a_job_on_a_fake_mig_slice(tmp_path: Path) -> None:
    server = Server(tmp_path, None, BASE_CONFIG, gpu_args=("--fake-gpus", "a100-mig"))
    server.start()
    try:
        job = server.cli(
            "submit", "--queue", "team-a", "--gpu-profile", "2g.20gb", "--",
            "sh", "-c", "echo on $CUDA_VISIBLE_DEVICES",
        )  # fmt: skip
        job_id = job.stdout.strip()
        wait_for("the job to finish", lambda: job_state(server, job_id) == "Succeeded")
        fake = SHAPES["a100-mig"]()
        (two_g,) = [s.uuid for g in fake.gpus if g.mig for s in g.mig if s.profile == "2g.20gb"]
        assert job_log(server, job_id) == f"on {two_g}\n"  # the slice's own MIG UUID
        status = server.cli("status", job_id, token=OPS).stdout
        assert "tasks: 1 × one MIG 2g.20gb slice (0.285 GPU-equivalent)" in status
        queues = server.cli("queues", token=OPS).stdout
        assert "GPUs: 4 of 4 healthy" in queues and "MIG slices: 20 of 20 healthy" in queues
        refused = server.cli(
            "submit", "--queue", "team-a", "--gpu-profile", "4g.40gb", "--", "true", check=False
        )
        assert refused.returncode == 1
        assert "no node in the cluster can host this request" in refused.stderr
        bogus = server.cli(
            "submit", "--queue", "team-a", "--gpu-profile", "9g", "--", "true", check=False
        )
        assert bogus.returncode == 1 and "invalid MIG profile '9g'" in bogus.stderr
        both = ("--gpus", "2", "--gpu-profile", "1g.10gb", "--", "true")
        twice = server.cli("submit", "--queue", "team-a", *both, check=False)
        assert twice.returncode == 2 and "not both" in twice.stderr
    finally:
        server.stop()
        server.kill_tasks()
        server.close_clients()
