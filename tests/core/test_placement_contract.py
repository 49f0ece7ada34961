"""The placement contract (rl_core.placement.contract): typed worker methods, the local placement and the pooled
one behind the same protocol, calls routed to the pool of the role they serve."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
from rl_core.cards import PlacementCard
from rl_core.placement import LOCAL, make_cluster, start_pool
from rl_core.placement.contract import Pending, Placement, WorkerError, WorkerMethod
from rl_core.placement.local import LocalCluster
from rl_core.placement.pools import PooledCluster
from rl_core.placement.worker import HybridWorker


def test_every_worker_method_is_a_method_of_the_hybrid_worker():
    for method in WorkerMethod:
        assert callable(getattr(HybridWorker, method.value, None)), f"{method} names no HybridWorker method"


@pytest.mark.parametrize("cls", [LocalCluster, PooledCluster])  # RayCluster: plugins/placement_ray/tests
def test_each_placement_has_the_protocols_methods(cls):
    for name in ("submit", "call", "close"):
        ours = inspect.signature(getattr(cls, name))
        theirs = inspect.signature(getattr(Placement, name))
        assert list(ours.parameters) == list(theirs.parameters), f"{cls.__name__}.{name}{ours} != Placement.{name}{theirs}"


def test_an_unknown_method_is_refused_naming_the_table():
    with pytest.raises(ValueError, match=r"unknown worker method 'update_actr'.*update_actor"):
        WorkerMethod.named("update_actr")


class FakeWorker:
    def __init__(self, stack, context, roles=None):
        self.context, self.roles, self.closed = context, roles, False

    def update_actor(self, batch):
        if batch == "bad":
            raise RuntimeError("no good")
        return {"rank": self.context.rank, "batch": batch}

    def shutdown(self):
        self.closed = True


def _stack(world_size=1):
    config = SimpleNamespace(trainer=SimpleNamespace(torch_threads=1, seed=3))
    return SimpleNamespace(config=config, sizes=SimpleNamespace(world_size=world_size, device="cpu"))


def test_local_placement_in_process_dispatches_typed_methods(monkeypatch):
    monkeypatch.setattr("rl_core.placement.worker.HybridWorker", FakeWorker)
    cluster = LocalCluster(_stack())
    assert isinstance(cluster, Placement)
    assert cluster.call(WorkerMethod.UPDATE_ACTOR, [("b0",)]) == [{"rank": 0, "batch": "b0"}]
    pending = cluster.submit(WorkerMethod.UPDATE_ACTOR, same_args=("b1",))
    assert isinstance(pending, Pending) and pending.result() == [{"rank": 0, "batch": "b1"}]
    with pytest.raises(ValueError, match="arguments for 2 ranks, the placement has 1"):
        cluster.call(WorkerMethod.UPDATE_ACTOR, [("a",), ("b",)])
    with pytest.raises(ValueError, match="unknown worker method"):
        cluster.call("not_a_method")
    failed = cluster.submit(WorkerMethod.UPDATE_ACTOR, same_args=("bad",))  # raised where the caller gathers
    with pytest.raises(RuntimeError, match="no good"):
        failed.result()
    worker = cluster._local
    cluster.close()
    assert worker.closed
    with pytest.raises(WorkerError, match="stopped"):
        cluster.call(WorkerMethod.UPDATE_ACTOR, same_args=("b2",))


class FakePool:
    """A placement that records what it was sent."""

    def __init__(self, name, world_size):
        self.name, self.world_size, self.sent, self.closed = name, world_size, [], False

    def submit(self, method, per_rank_args=None, *, same_args=()):
        args = list(per_rank_args) if per_rank_args is not None else [same_args] * self.world_size
        self.sent.append(method)
        return Pending(lambda: [(self.name, r, a) for r, a in enumerate(args)])

    def call(self, method, per_rank_args=None, *, same_args=()):
        return self.submit(method, per_rank_args, same_args=same_args).result()

    def close(self, force=False):
        self.closed = True


def test_pooled_placement_routes_each_method_to_the_pool_of_its_role():
    main, critic, rollout = FakePool("main", 2), FakePool("critic", 1), FakePool("rollout", 1)
    pooled = PooledCluster({"main": main, "critic": critic, "rollout": rollout})
    assert isinstance(pooled, Placement)
    assert pooled.call(WorkerMethod.UPDATE_CRITIC, [("c",)]) == [("critic", 0, ("c",))]
    assert pooled.call(WorkerMethod.GENERATE, [("p",)]) == [("rollout", 0, ("p",))]
    assert pooled.call(WorkerMethod.COMPUTE_REF_LOG_PROB, [("r0",), ("r1",)]) == [("main", 0, ("r0",)), ("main", 1, ("r1",))]
    # every pool saves its checkpoint: results pool after pool
    assert [r[0] for r in pooled.call(WorkerMethod.SAVE_CHECKPOINT, same_args=("dir",))] == ["main", "main", "critic", "rollout"]
    with pytest.raises(ValueError, match="runs on every pool"):
        pooled.call(WorkerMethod.SAVE_CHECKPOINT, [("a",), ("b",)])
    # overlap: a call on one pool is in flight while another pool runs
    pending = pooled.pool("rollout").submit(WorkerMethod.GENERATE, [("p2",)])
    pooled.call(WorkerMethod.UPDATE_ACTOR, [("a",), ("b",)])
    assert pending.waiting
    assert pending.result() == [("rollout", 0, ("p2",))] and not pending.waiting
    assert pending.result() == [("rollout", 0, ("p2",))]  # gathered once, kept
    with pytest.raises(KeyError, match="no pool 'ref'"):
        pooled.pool("ref")
    pooled.close()
    assert main.closed and critic.closed and rollout.closed


def test_make_cluster_builds_the_placement_of_the_plans_card():
    """The Plan's placement card decides (no registry, no name looked up): its factory gets the stack, the pool's roles
    and the pool; a stack built in code without a card runs locally, and only when the config says local."""
    made = []

    def make(stack, *, roles=None, pool="main"):
        made.append((roles, pool))
        return FakePool(pool, 1)

    config = SimpleNamespace(trainer=SimpleNamespace(placement="elsewhere"))
    stack = SimpleNamespace(config=config, sizes=SimpleNamespace(pools={}), placement=PlacementCard(name="elsewhere", factory=make))
    assert make_cluster(stack).name == "main" and made == [(None, "main")]
    assert start_pool(stack, roles=("rollout",), pool="rollout").name == "rollout" and made[-1] == (("rollout",), "rollout")
    with pytest.raises(ValueError, match="trainer.placement=elsewhere: this stack has no placement card"):
        make_cluster(SimpleNamespace(config=config, sizes=stack.sizes, placement=None))
    assert LOCAL.load().__name__ == "local_placement"


def test_placement_ray_without_its_distribution_is_a_check_problem_naming_it(tmp_path, monkeypatch, capsys):
    """rl-placement-ray not installed (its card absent from the registry): `rlcore check` stops on trainer.placement
    with the pip install, no traceback; local still resolves to core's own card."""
    import attrs
    from rl_core.cli.main import main
    from rl_core.config.load import load_config
    from rl_core.plan.resolver import resolve
    from rl_core.plugins import get_registry
    from rl_core_testing.tiny_run import write_tiny_run

    base = get_registry()
    without = attrs.evolve(base, cards={**base.cards, "placement": {"local": base.get("placement", "local")}})
    monkeypatch.setattr("rl_core.cli.check_cmd.get_registry", lambda: without)
    cfg = write_tiny_run(tmp_path)
    code = main(["check", str(cfg), "trainer.placement=ray", "--skip-device-check"])
    out = "".join(capsys.readouterr())
    assert code == 1 and "Traceback" not in out, out
    assert "trainer.placement: no placement named 'ray' is installed" in out and "pip install rl-placement-ray" in out, out
    plan, problems = resolve(load_config(cfg), without)
    assert plan is not None and plan.placement.name == "local" and plan.placement.provider.distribution == "rl-core"
