"""rl-placement-ray's config section ``ray`` (a ConfigSectionCard: rl_core.config.sections), read and checked with core's
own sections; used when ``trainer.placement=ray`` (docs/ray.md)."""

from __future__ import annotations

from typing import Any

import attrs
from attrs import field

from rl_core.config.schema import num, pos, text


@attrs.frozen(kw_only=True)
class RayConfig:
    """Used when ``trainer.placement=ray`` (docs/ray.md)."""

    # null: the cluster in $RAY_ADDRESS (set by `ray job submit`), else start a local one;
    # "auto": the cluster started on this machine with `ray start`; or "host:port" of the head
    address: str | None = None
    runtime_env: dict[str, Any] = field(factory=dict)  # passed to ray.init as is: env_vars, pip, working_dir, ...
    namespace: str = text("rl-core")
    cpus_per_worker: float = num(1.0, gt=0, hint="CPUs per worker, e.g. 1")  # CPUs each worker reserves (its placement-group bundle)
    num_cpus: int | None = pos(None, hint="null: all")  # a local start only: CPUs Ray may use (null: all)
    dashboard_host: str = "127.0.0.1"  # a local start only; 0.0.0.0 opens the dashboard to the network
    # a local start only: null binds every Ray server to loopback; an address of this machine opens them to that network
    node_ip_address: str | None = None
    collective_timeout_s: float = num(600.0, gt=0, hint="seconds, e.g. 600")  # torch.distributed timeout of the workers' group
    start_timeout_s: float = num(300.0, gt=0, hint="seconds, e.g. 300")  # waiting for the cluster to have room for every worker
