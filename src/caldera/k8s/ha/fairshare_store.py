"""Fair share over time across controller restarts (issue 39, DESIGN §2): each queue's decayed
GPU usage (core/fairshare.py) is kept under the key `fair_share` of the controller's state
ConfigMap (`caldera-state`, caldera/k8s/ha/statemap.py), which the controller already reads,
patches and creates — no new RBAC rule. The runtime reads it once when it starts
(`read_decayed_usage`) and writes it at most every `SAVE_EVERY` seconds
(`write_decayed_usage`); a standby taking over carries on from the same record.

The ConfigMap is anyone's to edit who may edit the namespace: a record that does not parse is
logged in one line and fair share starts from zero, as it did before the record was kept.
"""

from __future__ import annotations

import json
import logging

from caldera.core.fairshare import DecayedRecord
from caldera.k8s import names
from caldera.k8s.cluster.api import ClusterAPI, ClusterError, ClusterUnavailable
from caldera.k8s.ha.statemap import create_state_map

__all__ = ["KEY", "read_decayed_usage", "write_decayed_usage"]

log = logging.getLogger("caldera.k8s")

KEY = "fair_share"
"""The key of the state ConfigMap's data that holds the decayed usage (JSON)."""


def read_decayed_usage(api: ClusterAPI, namespace: str) -> DecayedRecord | None:
    """The decayed usage kept in the state ConfigMap (None: none kept, or unreadable)."""
    found = api.read_config_map(namespace, names.STATE_CONFIG_MAP)
    text = ((found or {}).get("data") or {}).get(KEY)
    if not text:
        return None
    try:
        return DecayedRecord.from_json(json.loads(text))
    except (ValueError, RecursionError) as error:  # json.JSONDecodeError is a ValueError
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        log.warning(
            "ConfigMap %s/%s key %s ignored, fair share starts from zero: %s",
            namespace,
            names.STATE_CONFIG_MAP,
            KEY,
            reason,
        )
        return None


def write_decayed_usage(api: ClusterAPI, namespace: str, record: DecayedRecord) -> None:
    """Replace the decayed usage kept in the state ConfigMap (made if missing)."""
    data = {KEY: json.dumps(record.to_json(), sort_keys=True)}
    try:
        api.patch_config_map(namespace, names.STATE_CONFIG_MAP, {"data": data})
    except ClusterUnavailable:
        raise
    except ClusterError:
        create_state_map(api, namespace, data)
