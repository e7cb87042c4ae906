"""Fair share over time across controller restarts on the real control plane (issue 39;
caldera/k8s/ha/fairshare_store.py): the controller's own ServiceAccount, with only the chart's
rules (get/patch on the `caldera-state` ConfigMap), keeps each queue's decayed usage under the
key `fair_share` beside the waiting modes, which the real API server's merge patch leaves
untouched; and a controller started after another carries on from the usage it kept. The
session's controller runs with fair share off: the restart test runs its own controllers, in
a thread, on namespaces of their own (as tests/k8s_real/test_real_gone.py does)."""

from __future__ import annotations

import math
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from caldera_support import CONFIG, Cluster, training_job, without_admission_policy
from real_support import wait_for
from test_real_gone import namespace_gone, new_namespace

from caldera.core.fairshare import DecayedRecord
from caldera.k8s import names
from caldera.k8s.cluster.cache import InformerCache
from caldera.k8s.cluster.client import (
    VOLCANO_GROUP,
    VOLCANO_VERSION,
    KubeClusterAPI,
    load_api_client,
)
from caldera.k8s.config import load_kube_config
from caldera.k8s.controller import Controller, sync_cluster_objects
from caldera.k8s.ha.fairshare_store import KEY, read_decayed_usage, write_decayed_usage
from caldera.k8s.runtime import KubeRuntime
from caldera.trainingjob_api import GROUP, PLURAL, VERSION

k8s: Any = kubernetes
STATE = str(CONFIG["kubernetes"]["state_namespace"])
QUEUE = "fair"  # the restart test's own queue
HALF_LIFE = 3600.0


def test_the_controllers_account_keeps_and_reads_decayed_usage_beside_the_waiting_modes(
    clean: Cluster,
) -> None:
    core = k8s.client.CoreV1Api(clean.client())

    def state_map() -> dict[str, str] | None:
        found = core.list_namespaced_config_map(
            STATE, field_selector=f"metadata.name={names.STATE_CONFIG_MAP}"
        ).items
        return (found[0].data or {}) if found else None

    # the session's controller makes it on its first step
    before = wait_for("the state ConfigMap", state_map)
    assert "throttles" in before
    api = KubeClusterAPI(load_api_client(str(clean.controller_kubeconfig)))
    record = DecayedRecord(1_800_000_000.0, {"team-a": 2.5e7, "serving": 0.0}, {"team-a": 8000})
    try:
        write_decayed_usage(api, STATE, record)
        assert read_decayed_usage(api, STATE) == record
        after = state_map()
        assert after is not None and after["throttles"] == before["throttles"]
    finally:  # the session's controller has fair share off: leave its state as it was
        core.patch_namespaced_config_map(names.STATE_CONFIG_MAP, STATE, {"data": {KEY: None}})


class Served:
    """One controller in a thread on its own namespaces, with fair share over time on (the
    session's controller has it off)."""

    def __init__(self, kubeconfig: Path, config: Path) -> None:
        loaded = load_kube_config(config)
        self.api = KubeClusterAPI.from_kubeconfig(str(kubeconfig))
        sync_cluster_objects(self.api, loaded.queues, loaded.settings)
        reads = InformerCache(self.api, loaded.settings)
        self.runtime = KubeRuntime(
            self.api, loaded.queues, loaded.policy, loaded.settings, reads=reads
        )
        self.stop = threading.Event()
        controller = Controller(self.runtime, resync=loaded.settings.resync)
        self.thread = threading.Thread(target=controller.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        if self.stop.is_set():
            return
        self.stop.set()
        self.thread.join(30)
        self.api.close()


def test_a_restarted_controller_carries_on_from_the_usage_kept_in_the_cluster(
    clean: Cluster, tmp_path: Path
) -> None:
    core = k8s.client.CoreV1Api(clean.client())
    served, state = f"fair-{secrets.token_hex(3)}", f"fair-state-{secrets.token_hex(3)}"
    for namespace in (served, state):
        new_namespace(core, namespace)
    config = tmp_path / "caldera.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "queues": [{"name": QUEUE}],
                "policy": {"grace_period": 3, "fair_share": {"half_life": HALF_LIFE}},
                "kubernetes": {
                    "namespaces": {served: {"queues": [QUEUE]}},
                    "state_namespace": state,
                    "scheduler_name": "default-scheduler",
                    "image": "registry.example/train:v1",
                    "resync": 2,
                    "leader_election": {"enabled": False},
                },
            }
        )
    )
    kubeconfig = clean.dev.kubeconfig()
    controllers: list[Served] = []
    try:
        with without_admission_policy(clean):
            # submitted first: the controller's first cycle starts it and keeps the usage at
            # once (never kept before), holding its 8 GPUs
            assert clean.apply("admin", served, training_job("holds", gpus=8)).returncode == 0
            controllers.append(Served(kubeconfig, config))
            api = controllers[0].api

            def kept_holding() -> DecayedRecord | None:
                record = read_decayed_usage(api, state)
                return record if record is not None and record.held.get(QUEUE) else None

            first = wait_for("the usage kept while the job runs", kept_holding)
            assert first.held == {QUEUE: 8000}
            controllers[0].close()  # the first controller goes; its pod keeps running
            time.sleep(2)  # a gap that a controller starting from zero would not count

            controllers.append(Served(kubeconfig, config))
            runtime = controllers[1].runtime
            wait_for("the new controller's first cycle", lambda: runtime.stats.cycles > 0)
            controllers[1].close()  # stopped: its memory is read without a race
            usage = runtime.kernel.decayed_usage
            assert usage is not None and usage.at is not None
            since = usage.at - first.at
            used = usage.view()[QUEUE]
            # the kept usage, decayed, and 8 GPUs held all along, the gap included
            assert since > 2
            assert used == pytest.approx(
                first.used.get(QUEUE, 0.0) * 0.5 ** (since / HALF_LIFE)
                + 8000 * HALF_LIFE / math.log(2) * (1 - 0.5 ** (since / HALF_LIFE)),
                rel=1e-6,
            )
    finally:
        for controller in controllers:
            controller.close()
        custom = k8s.client.CustomObjectsApi(clean.client())
        for namespace in (served, state):
            if not namespace_gone(core, namespace):
                custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
                core.delete_namespace(namespace)
        custom.delete_cluster_custom_object(VOLCANO_GROUP, VOLCANO_VERSION, "queues", QUEUE)
