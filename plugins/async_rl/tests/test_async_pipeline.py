"""rl_async without processes: the staleness gate, a forced stale batch (dropped / generated again), and
every way a weight sync can go missing (an old version, stale weights, a batch from weights never verified)."""

from __future__ import annotations

import os

import pytest
import torch
from rl_async.config import AsyncConfig
from rl_async.pipeline import RECEIVE_AND_GENERATE, RECEIVE_WEIGHTS, SEND_WEIGHTS, RolloutPipeline, check_transfer
from rl_async.staleness import DROP, USE, WAIT, StaleBatchError, StalenessGate
from rl_core.batch import Batch
from rl_core.placement.contract import WorkerMethod
from rl_core.weight_sync_check import StaleWeightsError, WeightTap

WEIGHTS = {"w": torch.arange(40, dtype=torch.float32).reshape(4, 10)}


class _Handle:
    def __init__(self, fn):
        self.fn = fn

    def result(self):
        return self.fn()


class FakePools:
    """A rollout pool of one worker and a train pool of one, talking through this object (no processes)."""

    def __init__(self, *, keep_old_version=False, corrupt=False, wrong_tag=False):
        self.rollout_version = -1
        self.sent_version = None
        self.generated = []  # prompt ids of each generation request
        self.receives_started = []  # the versions the rollout pool was asked to receive on its own, in order
        self.keep_old_version, self.corrupt, self.wrong_tag = keep_old_version, corrupt, wrong_tag
        self.rollout, self.train = _Side(self, "rollout"), _Side(self, "train")

    def send(self, version):
        tap = WeightTap(WEIGHTS.items())
        list(tap)
        self.sent_version, self.sent_samples = version, tap.values
        return [{"version": version, "sender": True, "samples": tap.values, "tensors": 1}]

    def receive(self, version):
        held = {k: v.clone() + (1.0 if self.corrupt else 0.0) for k, v in self.sent_samples.items()}
        if not self.keep_old_version:
            self.rollout_version = version
        return [{"version": self.rollout_version, "held": held, "tensors": 1}]

    def generate(self, args, receive=False):
        prompts = args[0][0]
        receipt = self.receive(args[0][2])[0] if receive else None  # overlapped sync: receive first
        self.generated.append(prompts["ids"].tolist())
        version = self.rollout_version - (1 if self.wrong_tag else 0)
        out = Batch({"ids": prompts["ids"].clone(), "policy_version": torch.full((len(prompts),), version)}, meta={"policy_version": version})
        if receipt is not None:
            out.meta["weight_receipt"] = receipt
        return [out]


class _Side:
    world_size = 1

    def __init__(self, pools, side):
        self.pools, self.side = pools, side

    def call(self, method, per_rank_args=None, *, same_args=()):
        if method == SEND_WEIGHTS:
            return self.pools.send(same_args[0])
        if method == RECEIVE_WEIGHTS:
            return self.pools.receive(same_args[0])
        return [None]

    def submit(self, method, per_rank_args=None, *, same_args=()):
        if method == RECEIVE_WEIGHTS:
            self.pools.receives_started.append(same_args[0])
            return _Handle(lambda: self.pools.receive(same_args[0]))
        if method in (WorkerMethod.GENERATE, RECEIVE_AND_GENERATE):
            result = self.pools.generate(per_rank_args, receive=method == RECEIVE_AND_GENERATE)
            return _Handle(lambda: result)
        return _Handle(lambda: [None])

    def dead_ranks(self):
        return []


class Loader:
    def __init__(self):
        self.i = 0

    def next_batch(self):
        self.i += 1
        return Batch({"ids": torch.tensor([self.i * 10, self.i * 10 + 1])})

    def state_dict(self):
        return {"i": self.i}


def _pipeline(pools, max_staleness=1, on_stale="drop", overlap_sync=False):
    loader = Loader()
    p = RolloutPipeline(
        rollout=pools.rollout, train=pools.train, async_cfg=AsyncConfig(max_staleness=max_staleness, on_stale=on_stale),
        split=lambda prompts, params: ([(prompts, params)], 0), merge=lambda results, pad, params: results[0],
        draw=loader.next_batch, loader_state=loader.state_dict, overlap_sync=overlap_sync,
    )
    p.sync(0)
    return p, loader


def _run_members(member, bound_s=60):
    """Run ``member(0)`` and ``member(1)`` (a transfer group's two ranks) in threads of this process; fail if one is
    still running after ``bound_s``."""
    import threading

    threads = [threading.Thread(target=member, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(bound_s)
    assert not any(t.is_alive() for t in threads)


def test_the_gate_admits_up_to_max_staleness_and_counts_the_rest():
    gate = StalenessGate(1, "drop")
    assert gate.verdict(3, 3) == USE and gate.verdict(2, 3) == USE
    assert gate.verdict(1, 3) == DROP and gate.dropped == 1
    assert StalenessGate(0, "wait").verdict(2, 3) == WAIT
    with pytest.raises(StaleBatchError, match="newer than the trainer"):
        gate.verdict(4, 3)
    assert gate.metrics(1, 3)["async/staleness"] == 2.0


def test_one_step_off_policy_schedule_and_the_checkpointed_loader_position():
    pools = FakePools()
    p, loader = _pipeline(pools)
    p.prompts(1)
    batch, m = p.batch(1, None, trainer_version=0)
    assert m["async/staleness"] == 0 and batch["ids"].tolist() == [10, 11]
    p.prefetch(2, None)  # step 2's prompts generate with version 0 while step 1 updates
    assert pools.generated[-1] == [20, 21] and p.data_state() == {"i": 1}  # a checkpoint re-draws the in-flight prompts
    p.sync(1)
    assert p.prompts(2)["ids"].tolist() == [20, 21]
    batch, m = p.batch(2, None, trainer_version=1)
    assert m["async/staleness"] == 1 and m["async/policy_version"] == 0 and batch["policy_version"].tolist() == [0, 0]
    assert p.data_state() is None


def test_an_overlapped_sync_is_received_with_the_next_generation_and_checked_before_its_batch_is_used():
    pools = FakePools()
    p, loader = _pipeline(pools, overlap_sync=True)
    assert pools.rollout_version == -1 and p.version == 0  # sent; nothing received yet
    p.prompts(1)
    batch, m = p.batch(1, None, trainer_version=0)  # its generation request received version 0 first
    assert pools.rollout_version == 0 and m["async/staleness"] == 0 and batch["policy_version"].tolist() == [0, 0]
    assert "weight_receipt" not in batch.meta and "timing_s/sync_receive" in m
    p.prefetch(2, None)
    p.sync(1)  # the same schedule as without overlap: step 2's batch was generated with version 0
    batch, m = p.batch(2, None, trainer_version=1)
    assert m["async/staleness"] == 1 and batch["policy_version"].tolist() == [0, 0] and pools.rollout_version == 0
    p.drain()  # no generation took version 1 along: received on its own
    assert pools.rollout_version == 1 and p._pending is None

    corrupt = FakePools(corrupt=True)
    p, _ = _pipeline(corrupt, overlap_sync=True)  # the receipt is checked when the batch is collected
    p.prompts(1)
    with pytest.raises(StaleWeightsError, match="rollout pool rank 0 kept stale weights"):
        p.batch(1, None, trainer_version=0)


def test_a_sync_sent_in_the_background_before_the_last_step_is_received_during_that_step():
    """Issue #36 (a hang on two GPUs): the last step prefetches nothing, so no generation request took the version
    sent after the step before along, and the rollout pool received it only in drain() after the whole train step,
    while the sender's thread waited in the broadcast. receive_pending() starts that receive at once; drain() checks it."""
    for corrupt in (False, True):
        pools = FakePools()
        p, _ = _pipeline(pools, overlap_sync=True)
        p.prompts(1)
        p.batch(1, None, trainer_version=0)
        p.prefetch(2, None)  # step 2 (the last one) is generated during step 1's update
        p.drain()
        p.sync(1)  # version 1 leaves in the background
        p.batch(2, None, trainer_version=1)
        p.receive_pending()  # the trainer's last step: nothing to prefetch
        assert pools.receives_started == [1]  # asked before the train step's work, not after it
        p.receive_pending()  # idempotent
        assert pools.receives_started == [1]
        pools.corrupt = corrupt
        if corrupt:  # a receive started this way is checked like any other
            with pytest.raises(StaleWeightsError, match="rollout pool rank 0 kept stale weights"):
                p.drain()
            continue
        p.drain()  # the end of the train step: checked
        assert pools.rollout_version == 1 and p._pending is None and p._receiving is None
    # a generation in flight: its own request comes first (the rollout workers take one request at a time)
    pools = FakePools()
    p, _ = _pipeline(pools, overlap_sync=True)
    p.prompts(1)
    p.batch(1, None, trainer_version=0)
    p.prefetch(2, None)
    p.drain()
    p.sync(1)
    p.prefetch(3, None)  # takes version 1 along
    p.receive_pending()
    assert pools.receives_started == [] and pools.rollout_version == 1


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs (NCCL): the CPU has no streams")
def test_a_background_send_on_gpus_does_not_hold_the_train_step_s_gpu_work():
    """Issue #36: each broadcast's wait() orders the calling thread's current stream after the broadcast; the sender's
    thread shared the default stream with the train step, so the step's GPU work (and its host reads) waited for a
    broadcast that ends only once the rollout pool receives, which came after the step: NCCL's watchdog ended the
    run. The train side here reads a GPU result while the receiver has not joined yet; it must not wait for it."""
    from rl_async.transfer import TransferGroup
    from rl_core.placement.rendezvous import Rendezvous

    weights = {"w": torch.randn(16, 2**20, device="cuda:0")}  # 64 MiB: more than NCCL's buffers take without a receiver
    opened = Rendezvous(None)
    groups, got = {}, {}

    def join(rank):
        torch.cuda.set_device(rank)
        groups[rank] = TransferGroup(opened.address, rank, 2, timeout_s=20, device=f"cuda:{rank}", opened=opened if rank == 0 else None)

    def first_sync(rank):  # NCCL connects at the first collective, with both members in it: done before the test
        join(rank)
        if rank == 0:
            groups[0].send(iter(weights.items()), bucket_bytes=2**30)
        else:
            list(groups[1].receive())

    _run_members(first_sync)

    def train_step():
        torch.cuda.set_device(0)
        x = torch.ones(1024, 1024, device="cuda:0")
        float((x @ x).sum())  # a host read of the train step's GPU work, issued on the default stream

    torch.cuda.set_device(0)
    groups[0].send_in_background(iter(weights.items()), bucket_bytes=2**30)  # the rollout pool has not joined yet
    assert _in_thread(train_step, bound_s=10) is None  # before the fix: waits for the receiver, then NCCL's timeout
    def receive():
        torch.cuda.set_device(1)
        got.update(groups[1].receive())

    assert _in_thread(receive) is None  # the rollout pool receives after the step
    groups[0].wait_sent(30)
    for g in groups.values():
        g.close()
    assert torch.equal(got["w"].cpu(), weights["w"].cpu())


def test_a_background_send_is_a_snapshot_and_arrives_exactly():
    """send_in_background copies the weights before it returns: changing them afterwards changes nothing sent."""
    from rl_async.transfer import TransferGroup
    from rl_core.placement.rendezvous import Rendezvous

    weights = {"a": torch.randn(64, 8), "b": torch.arange(10).to(torch.bfloat16)}
    want = {k: v.clone() for k, v in weights.items()}
    got, counts = {}, {}
    opened = Rendezvous(None)

    def member(rank):
        group = TransferGroup(opened.address, rank, 2, timeout_s=30, opened=opened if rank == 0 else None)
        if rank == 0:
            counts["sent"] = group.send_in_background(iter(weights.items()), bucket_bytes=128)
            for t in weights.values():  # the next update, while the thread broadcasts
                t.add_(1)
            group.wait_sent(30)
        else:
            got.update(group.receive())
        group.close()

    _run_members(member)
    assert counts["sent"][0] == 2 and all(torch.equal(got[k], want[k]) for k in want)


@pytest.mark.parametrize("on_stale", ["drop", "wait"])
def test_a_forced_stale_batch_is_dropped_or_generated_again(on_stale):
    pools = FakePools()
    p, loader = _pipeline(pools, max_staleness=1, on_stale=on_stale)
    p.prompts(1)
    p.batch(1, None, trainer_version=0)
    p.prefetch(2, None)  # generated with version 0 ...
    p.sync(1)
    p.sync(2)  # ... and the trainer moved on twice: staleness 2 > 1
    batch, m = p.batch(2, None, trainer_version=2)
    assert m["async/staleness"] == 0 and batch["policy_version"].tolist() == [2, 2]
    if on_stale == "drop":
        assert m["async/dropped_batches"] == 1 and batch["ids"].tolist() == [30, 31]  # the next prompts instead
    else:
        assert m["async/regenerated_batches"] == 1 and batch["ids"].tolist() == [20, 21]  # the same prompts again
    assert len(pools.generated) == 3


def test_a_rollout_that_keeps_its_old_version_is_an_error():
    with pytest.raises(StaleWeightsError, match="rollout pool rank 0 holds policy version -1 after the sync of version 0"):
        _pipeline(FakePools(keep_old_version=True))


def test_a_rollout_holding_other_weights_is_an_error_with_fingerprints():
    with pytest.raises(StaleWeightsError, match=r"rollout pool rank 0 kept stale weights.*w \(fingerprint sent"):
        _pipeline(FakePools(corrupt=True))


def test_a_batch_from_weights_never_verified_is_an_error():
    p, _ = _pipeline(FakePools(wrong_tag=True))
    p.prompts(1)
    with pytest.raises(StaleBatchError, match="a weight sync went missing"):
        p.batch(1, None, trainer_version=0)


def test_check_transfer_wants_exactly_one_sender():
    with pytest.raises(StaleWeightsError, match="0 train ranks sent"):
        check_transfer(3, [{"version": 3, "sender": False}], [])


BASE = ["trainer.device=cpu", "data.train_batch_size=4", "rollout.n=2", "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=2"]


def _config(*overrides):
    from rl_core.config.load import load_config

    return load_config(None, [*BASE, *overrides])


def _sizes(*overrides):
    from rl_core.config.normalize import normalize

    return normalize(_config(*overrides))


def test_a_rollout_pool_of_its_own_is_sized_and_async_needs_one():
    from rl_async.checks import problems as async_problems

    _, sizes, problems = _sizes("rollout.n_gpus_per_node=2", "async.max_staleness=1")
    assert not problems and sizes.pools["rollout"] == (2, 2) and sizes.rollout_replicas == 2 and sizes.devices == 3
    assert not async_problems(_config("rollout.n_gpus_per_node=2", "async.max_staleness=1"))
    (p,) = async_problems(_config("async.max_staleness=1"))  # rl-async's check (core sizes the run as a synchronous one)
    assert p.key == "async.max_staleness" and "rollout.n_gpus_per_node" in p.fix
    (p,) = async_problems(_config("rollout.n_gpus_per_node=1", "rollout.multi_turn.enable=true"))
    assert p.key == "rollout.n_gpus_per_node" and "multi-turn" in p.what
    # Ray places the rollout pool like the others (tests/ray/test_ray_async.py), on several nodes too; local has one node
    _, sizes, problems = _sizes("rollout.n_gpus_per_node=1", "rollout.nnodes=2", "trainer.placement=ray", "async.max_staleness=1")
    assert not problems and sizes.pools["rollout"] == (2, 2)
    _, sizes, problems = _sizes("rollout.n_gpus_per_node=1", "rollout.nnodes=2")
    assert sizes is None and [p.key for p in problems] == ["rollout.nnodes"] and "trainer.placement=ray" in problems[0].fix


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from rl_core_testing.tiny_run import write_tiny_run

    return write_tiny_run(tmp_path_factory.mktemp("run"))


def _plan(run, registry, *overrides):
    from rl_core.config.load import load_config
    from rl_core.plan.checks import plan_for

    return plan_for(load_config(run, list(overrides)), registry, devices=False)


def test_the_plan_holds_the_installed_rollout_pool(tiny_run):
    from rl_core.plugins import get_registry

    registry = get_registry()
    plan, problems = _plan(tiny_run, registry, "rollout.n_gpus_per_node=1", "async.max_staleness=1")
    assert plan is not None, [p.render() for p in problems]
    assert plan.rollout_pool.name == "async" and plan.rollout_pool.provider.distribution == "rl-async"
    assert plan.rollout_pool_fn is RolloutPipeline.__init__.__globals__["make"]
    from rl_async.worker import WeightTransfer

    assert plan.rollout_pool_worker_fn is WeightTransfer
    # every method the schedule calls on the workers is one the card names and the extension has
    from rl_async import pipeline

    called = {v.value for v in vars(pipeline).values() if type(v).__name__ == "ExtensionMethod"}
    assert called == set(plan.rollout_pool.methods) and all(callable(getattr(WeightTransfer, m, None)) for m in called)
    plan, problems = _plan(tiny_run, registry)  # the rollout in the actor's workers: no rollout pool
    assert plan is not None and plan.rollout_pool is None and plan.rollout_pool_fn is None
    plan, problems = _plan(tiny_run, registry, "async.max_staleness=1")
    assert plan is None and [p.key for p in problems if p.severity == "error"] == ["async.max_staleness"]


@pytest.mark.parametrize("key", ["rollout.n_gpus_per_node=1", "async.max_staleness=1", "async.bucket_mb=64"])
def test_without_rl_async_a_rollout_pool_or_an_async_key_names_the_package(tiny_run, key):
    from rl_core.plugins import Registry, get_registry

    installed = get_registry()
    without = Registry(cards={**installed.cards, "rollout_pool": {}, "check": {n: c for n, c in installed.cards["check"].items()
                                                                             if c.provider is None or c.provider.distribution != "rl-async"}})
    plan, problems = _plan(tiny_run, without, key)
    wrong = [p for p in problems if p.severity == "error"]
    assert plan is None and [p.key for p in wrong] == [key.split("=")[0]], [p.render() for p in problems]
    assert "pip install rl-async" in wrong[0].fix and "not installed" in wrong[0].what


@pytest.mark.parametrize("where", ["one node", "several nodes"])
def test_the_bucketed_transfer_rebuilds_every_tensor_exactly(where):
    """Two members of a gloo transfer group (threads of this process): many small buckets, mixed dtypes and shapes.
    One node: a FileStore in a private folder, loopback; several (Ray) nodes: a TCP store that the sender hosts on
    its node's address (here 127.0.0.1), each member's gloo device bound to its own node's address."""
    from rl_async.transfer import TransferGroup
    from rl_core.placement.rendezvous import Rendezvous

    torch.manual_seed(0)
    sent = [("a", torch.randn(3, 5)), ("b", torch.randn(7).to(torch.bfloat16)), ("c", torch.arange(6).reshape(2, 3)), ("d", torch.randn(0))]
    got, counts = {}, {}
    host = None if where == "one node" else "127.0.0.1"
    opened = Rendezvous(host)
    if host is None:
        assert opened.address.startswith("file://") and (os.stat(opened.folder).st_mode & 0o777) == 0o700
    else:  # the store listens on the node's address only, never on every interface
        assert opened.address.startswith("tcp://127.0.0.1:") and opened.listener.getsockname()[0] == "127.0.0.1"
    folder = opened.folder

    def member(rank):
        group = TransferGroup(opened.address, rank, 2, timeout_s=30, bind=host, opened=opened if rank == 0 else None)
        if rank == 0:
            counts["sent"] = group.send(iter(sent), bucket_bytes=16)  # a bucket every 16 bytes: several per run
        else:
            got.update(group.receive())
        group.close()

    _run_members(member)
    assert counts["sent"] == (4, sum(t.numel() * t.element_size() for _, t in sent))
    assert list(got) == [n for n, _ in sent]
    for name, tensor in sent:
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name
    assert folder is None or not os.path.exists(folder)  # the sender's close removes the rendezvous folder


def _in_thread(fn, bound_s=60):
    """Run ``fn`` in a thread; its exception (None if it returned), or fail when it is still running after ``bound_s``."""
    import threading

    caught = []

    def run():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            caught.append(exc)
        else:
            caught.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(bound_s)
    assert not thread.is_alive(), f"still waiting after {bound_s} s: the transfer's timeout did not bound it"
    return caught[0]


def test_a_transfer_member_whose_peer_never_joins_fails_instead_of_waiting():
    """The sender alone in a group of two: the store's wait for the missing member is bounded by async.sync_timeout_s."""
    from rl_async.transfer import TransferGroup
    from rl_core.placement.rendezvous import Rendezvous, join_store

    opened = Rendezvous(None)
    try:
        exc = _in_thread(lambda: TransferGroup(opened.address, 0, 2, timeout_s=1, opened=None))
        # NCCL's members swap its unique id through the store: that wait is bounded too (a FileStore's own: 300 s)
        store_exc = _in_thread(lambda: join_store(opened.address, 1, 2, 1).get("never-set"), bound_s=30)
    finally:
        opened.close()
    assert exc is not None and store_exc is not None


def test_a_receiver_whose_sender_never_sends_gets_a_named_timeout():
    """Both members join; the sender then sends nothing: the receiver's broadcast wait ends after the timeout with an
    error naming its side and the key to raise (the same bounded wait serves NCCL, whose plain wait() would not block)."""
    from rl_async.transfer import TransferGroup
    from rl_core.placement.rendezvous import Rendezvous

    opened = Rendezvous(None)
    groups = {}

    def join(rank):
        groups[rank] = TransferGroup(opened.address, rank, 2, timeout_s=2, opened=opened if rank == 0 else None)

    import threading

    sender = threading.Thread(target=join, args=(0,), daemon=True)
    sender.start()
    assert _in_thread(lambda: join(1)) is None
    sender.join(60)
    exc = _in_thread(lambda: list(groups[1].receive()))
    for g in groups.values():
        g.close()
    assert isinstance(exc, RuntimeError), exc
    assert "rollout pool rank 0 (receiver)" in str(exc) and "async.sync_timeout_s=2" in str(exc)


def test_member_device_names_the_workers_gpu():
    from rl_async.transfer import member_device

    assert member_device("cpu") == torch.device("cpu")
    assert member_device("cuda:1") == torch.device("cuda", 1)  # a rollout pool's worker on the second GPU


@pytest.mark.parametrize(
    ("overrides", "overlap", "warns"),
    [
        (["async.max_staleness=1"], True, True),  # the CPU default: overlapped; nothing corrects for the staleness
        (["async.max_staleness=1", "rollout.calculate_log_probs=true", "algorithm.rollout_correction.rollout_is=token"], True, False),
        (["async.max_staleness=0", "async.overlap_sync=true"], False, False),  # synchronous: nothing to overlap with
        (["async.max_staleness=1", "async.overlap_sync=false"], False, True),
    ],
)
def test_the_card_s_factory_reads_the_async_section(overrides, overlap, warns, caplog):
    import logging

    from rl_async.pipeline import make
    from rl_core.placement.rollout_pool import RolloutPoolHandle

    pools = FakePools()
    handle = RolloutPoolHandle(config=_config("rollout.n_gpus_per_node=1", *overrides), rollout=pools.rollout, train=pools.train,
                               split=None, merge=None, draw=None, loader_state=None)
    with caplog.at_level(logging.WARNING, logger="rl_async.pipeline"):
        schedule = make(handle)
    assert isinstance(schedule, RolloutPipeline) and schedule.overlap_sync is overlap and schedule.rollout is pools.rollout
    assert ("nothing reweights them" in caplog.text) is warns
