"""Fair share over time's record on the real control plane (issue 39): the controller's own
ServiceAccount, with only the chart's rules (get/patch on the `caldera-state` ConfigMap),
keeps each queue's decayed usage under the key `fair_share` and reads it back; the real API
server's merge patch leaves the waiting modes beside it untouched
(caldera/k8s/fairshare_store.py). The restart itself is tested on the fake cluster
(tests/k8s/test_k8s_fair_share_restart.py): the session's controller runs with fair share
over time off."""

from __future__ import annotations

from typing import Any

import kubernetes
from caldera_support import CONFIG, Cluster
from real_support import wait_for

from caldera.core.fairshare import DecayedRecord
from caldera.k8s import names
from caldera.k8s.client import KubeClusterAPI, load_api_client
from caldera.k8s.fairshare_store import KEY, read_decayed_usage, write_decayed_usage

k8s: Any = kubernetes
STATE = str(CONFIG["kubernetes"]["state_namespace"])


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
