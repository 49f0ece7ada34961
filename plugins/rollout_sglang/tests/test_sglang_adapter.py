"""The adapter's own logic against a recording client, and the quirk workarounds: no engine needed.

The engine itself is exercised in ``test_sglang_conformance.py``; here the
client is a small fake that records calls, so the order of the weight-update
session, TP placeholders, memory release and the HTTP mapping are checked
everywhere.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import attrs
import pytest
import torch
from rl_core.backends import SamplingParams, WorkerContext
from rl_core.config.load import load_config
from rl_core_testing.rollout_conformance import prompt_batch
from rl_core_testing.tiny_model import make_tiny_model_dir
from rl_rollout_sglang import sglang_quirks
from rl_rollout_sglang.clients import EngineStartError, ServerClient
from rl_rollout_sglang.engine import SGLangRollout


class RecordingClient:
    """Answers every request with tokens 7, 8 (log-probs -1, -2) and records every call."""

    context_length = 64

    def __init__(self, fail_update: bool = False) -> None:
        self.calls: list[tuple] = []
        self.fail_update = fail_update

    def generate(self, input_ids, sampling, return_logprob):
        self.calls.append(("generate", [list(p) for p in input_ids], [dict(s) for s in sampling], return_logprob))
        lps = [(-1.0, 7, None), (-2.0, 8, None)]
        return [{"output_ids": [7, 8], "meta_info": {"output_token_logprobs": lps, "finish_reason": {"type": "length"}}} for _ in input_ids]

    def begin_weight_update(self):
        self.calls.append(("begin",))

    def end_weight_update(self):
        self.calls.append(("end",))

    def update_weights_from_tensor(self, named_tensors, flush_cache):
        self.calls.append(("update", [n for n, _ in named_tensors], flush_cache))
        return (False, "boom: no such parameter") if self.fail_update else (True, "Succeeded")

    def flush_cache(self):
        self.calls.append(("flush",))

    def release_memory_occupation(self, tags=None):
        self.calls.append(("release", tags))

    def resume_memory_occupation(self, tags=None):
        self.calls.append(("resume", tags))

    def shutdown(self):
        self.calls.append(("shutdown",))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("m"), "llama", hidden=64, heads=4, kv_heads=2, layers=2)


def _adapter(model_dir, client, *overrides, context=None):
    cfg = load_config(overrides=[f"model.path={model_dir}", "data.max_prompt_length=32", "data.max_response_length=8", *overrides])
    return SGLangRollout(cfg, context or WorkerContext(), client=client)


def _weights(model_dir):
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


def test_requests_one_per_sample_with_its_seed(model_dir):
    client = RecordingClient()
    eng = _adapter(model_dir, client, "rollout.generation_batch_size=3")
    batch = prompt_batch(model_dir, ("ab", "c"))
    out = eng.generate(batch, SamplingParams(n=2, max_new_tokens=4, temperature=0.8, top_k=5, seed=10, logprobs=True))
    calls = [c for c in client.calls if c[0] == "generate"]
    # each engine call whose requests repeat a prompt first prefills its distinct prompts once, with no new token
    prefills = [c for c in calls if all(s["max_new_tokens"] == 0 for s in c[2])]
    gens = [c for c in calls if c not in prefills]
    assert calls.index(prefills[0]) == 0 and len(prefills) == 1  # before the first chunk [ab, ab, c]; the last ([c]) repeats nothing
    assert prefills[0][1] == [[3 + ord("a"), 3 + ord("b")], [3 + ord("c")]] and prefills[0][3] is False
    assert [len(c[1]) for c in gens] == [3, 1]  # 4 sequences, at most 3 per engine call
    ids = [p for c in gens for p in c[1]]
    sampling = [s for c in gens for s in c[2]]
    assert ids == [[3 + ord("a"), 3 + ord("b")]] * 2 + [[3 + ord("c")]] * 2
    assert [s["sampling_seed"] for s in sampling] == [10, 11, 12, 13]
    assert all(s["temperature"] == 0.8 and s["top_k"] == 5 and s["max_new_tokens"] == 4 for s in sampling)
    assert out.tensors["responses"].tolist() == [[7, 8, 0, 0]] * 4
    assert out.tensors["rollout_log_probs"][0].tolist() == [-1.0, -2.0, 0.0, 0.0]


def test_share_prefill_off_or_without_a_radix_cache_sends_only_the_samples(model_dir):
    from rl_rollout_sglang.plugin import check_engine_kwargs

    params = SamplingParams(n=3, max_new_tokens=2, temperature=1.0, seed=1)
    for override in ("rollout.engine_kwargs.share_prefill=false", "rollout.engine_kwargs.disable_radix_cache=true"):
        client = RecordingClient()
        _adapter(model_dir, client, override).generate(prompt_batch(model_dir, ("ab", "c")), params)
        (call,) = [c for c in client.calls if c[0] == "generate"]
        assert len(call[1]) == 6 and all(s["max_new_tokens"] == 2 for s in call[2])
    client = RecordingClient()
    _adapter(model_dir, client).generate(prompt_batch(model_dir, ("ab", "c")), attrs.evolve(params, n=1))
    assert len([c for c in client.calls if c[0] == "generate"]) == 1  # nothing repeats: no prefill call
    cfg = load_config(overrides=[f"model.path={model_dir}", "rollout.name=sglang", "rollout.engine_kwargs.share_prefill=1"])
    assert [p.key for p in check_engine_kwargs(cfg)] == ["rollout.engine_kwargs.share_prefill"]


def test_greedy_sends_one_request_per_prompt(model_dir):
    client = RecordingClient()
    eng = _adapter(model_dir, client)
    out = eng.generate(prompt_batch(model_dir, ("ab", "c")), SamplingParams(n=3, max_new_tokens=2, greedy=True, seed=4))
    (call,) = [c for c in client.calls if c[0] == "generate"]
    assert len(call[1]) == 2 and all(s == {"max_new_tokens": 2, "temperature": 0.0} for s in call[2])
    assert len(out) == 6 and "rollout_log_probs" not in out.tensors.keys()


def test_weight_sync_is_bracketed_bucketed_and_flushed(model_dir):
    client = RecordingClient()
    eng = _adapter(model_dir, client, "rollout.engine_kwargs.weight_sync_bucket_mb=0.02")  # ~20 KB buckets
    weights = _weights(model_dir)
    eng.load_weights(weights.items())
    kinds = [c[0] for c in client.calls]
    assert kinds[0] == "begin" and kinds[-2:] == ["end", "flush"]
    updates = [c for c in client.calls if c[0] == "update"]
    assert len(updates) > 2 and all(c[2] is False for c in updates)  # the cache is flushed once, at the end
    assert [n for c in updates for n in c[1]] == list(weights)  # every tensor once, in order
    meta = eng.generate(prompt_batch(model_dir, ("ab",)), SamplingParams(n=1, max_new_tokens=2)).meta  # the sync's report
    assert meta["rollout/weight_sync_calls"] == len(updates) and meta["rollout/weight_sync_s"] > 0
    assert meta["rollout/weight_sync_gib"] * 2**30 == sum(v.numel() * v.element_size() for v in weights.values())
    assert "rollout/weight_sync_s" not in eng.generate(prompt_batch(model_dir, ("ab",)), SamplingParams(n=1, max_new_tokens=2)).meta


def test_weight_sync_failure_carries_sglangs_message_and_closes_the_session(model_dir):
    client = RecordingClient(fail_update=True)
    eng = _adapter(model_dir, client)
    with pytest.raises(RuntimeError, match="SGLang update_weights_from_tensor failed: boom: no such parameter"):
        eng.load_weights(_weights(model_dir).items())
    assert [c[0] for c in client.calls] == ["begin", "update", "end"]


def test_bad_names_are_refused_before_anything_is_sent(model_dir):
    client = RecordingClient()
    eng = _adapter(model_dir, client)
    with pytest.raises(ValueError, match="unexpected weight 'model.layers.99.mlp.up_proj.weight'"):
        eng.load_weights([("model.layers.99.mlp.up_proj.weight", torch.zeros(2, 2))])
    assert not [c for c in client.calls if c[0] == "update"]


def test_non_leading_tp_rank_holds_no_engine(model_dir):
    client = RecordingClient()
    eng = _adapter(model_dir, None, "rollout.tensor_model_parallel_size=2", context=WorkerContext(rank=1, world_size=2))
    assert eng.client is None and not eng.leader
    drained = []
    eng.load_weights((drained.append(n) or (n, t)) for n, t in _weights(model_dir).items())
    assert len(drained) == len(_weights(model_dir))  # the trainer's iterator is consumed (its gathers are collective)
    out = eng.generate(prompt_batch(model_dir, ("ab",)), SamplingParams(n=2, max_new_tokens=3, logprobs=True))
    assert out.tensors["response_mask"].sum() == 0 and out.tensors["responses"].shape == (2, 3)
    assert not client.calls


ALL = ["kv_cache", "weights", "cuda_graph"]


def _kinds(client):
    """The calls, a weight sync's bucket updates as one "sync"."""
    out = []
    for c in client.calls:
        kind = "sync" if c[0] in ("begin", "update", "end", "flush") else c[0]
        if kind != "sync" or not out or out[-1] != ("sync",):
            out.append(c[:2] if kind in ("release", "resume") else (kind,))
    return out


def test_memory_release_on_gpu_only(model_dir, caplog):
    client = RecordingClient()
    gpu = _adapter(model_dir, client, context=WorkerContext(device="cuda"))
    assert gpu.weights_backup  # the adapter's default: the engine starts with enable_weights_cpu_backup
    gpu.sleep()
    gpu.sleep()
    out = gpu.generate(prompt_batch(model_dir, ("ab",)), SamplingParams(n=1, max_new_tokens=2))  # resumes first
    assert out.meta["rollout/sleep_s"] >= 0 and out.meta["rollout/wake_s"] >= 0  # reported once, with the next batch
    gpu.sleep()
    gpu.wake_up()
    # every region released; a generation resumes them all in one call, a wake-up the weights only
    assert _kinds(client) == [("release", ALL), ("resume", ALL), ("generate",), ("release", ALL), ("resume", ["weights"])]
    cpu_client = RecordingClient()
    cpu = _adapter(model_dir, cpu_client)
    cpu.sleep()
    cpu.wake_up()
    assert cpu_client.calls == []
    off = RecordingClient()
    _adapter(model_dir, off, "rollout.enable_sleep=false", context=WorkerContext(device="cuda")).sleep()
    assert off.calls == []


def test_a_sync_after_a_wake_up_comes_before_the_kv_cache(model_dir):
    """The GRPO step: generate, sleep, (train), wake-up, sync, generate. The weights' memory comes back before the sync,
    the KV cache and the graphs' after it (verl's order); the resumes' seconds add up in the next batch's wake_s."""
    client = RecordingClient()
    eng = _adapter(model_dir, client, context=WorkerContext(device="cuda"))
    eng.generate(prompt_batch(model_dir, ("ab",)), SamplingParams(n=1, max_new_tokens=2))
    eng.sleep()
    eng.wake_up()
    eng.wake_up()  # nothing more to resume
    eng.load_weights(_weights(model_dir).items())
    out = eng.generate(prompt_batch(model_dir, ("ab",)), SamplingParams(n=1, max_new_tokens=2))
    assert _kinds(client) == [("generate",), ("release", ALL), ("resume", ["weights"]), ("sync",),
                              ("resume", ["kv_cache", "cuda_graph"]), ("generate",)]
    assert out.meta["rollout/wake_s"] > 0 and out.meta["rollout/weight_sync_s"] > 0
    # a sync with nothing awake to resume first (sleep, then the sync directly) resumes the weights itself; a sleep
    # after it, before any generation, releases them again (the KV cache and the graphs' memory still are)
    client.calls.clear()
    eng.sleep()
    eng.load_weights(_weights(model_dir).items())
    eng.sleep()
    assert _kinds(client) == [("release", ALL), ("resume", ["weights"]), ("sync",), ("release", ["weights"])]


def test_without_a_host_copy_the_weights_go_only_where_a_sync_follows(model_dir, caplog):
    """enable_weights_cpu_backup=false: SGLang drops released weights. A sleep releases them only once the engine takes
    full syncs, and a generation after such a release with no sync since is refused, never run on garbage."""
    client = RecordingClient()
    eng = _adapter(model_dir, client, "rollout.engine_kwargs.enable_weights_cpu_backup=false", context=WorkerContext(device="cuda"))
    assert not eng.weights_backup
    batch, params = prompt_batch(model_dir, ("ab",)), SamplingParams(n=1, max_new_tokens=2)
    # no sync yet (a reward judge's engine, or generation before the first sync): the weights stay on the GPU
    with caplog.at_level("INFO", logger="rl_rollout_sglang.engine"):
        eng.sleep()
    assert "the weights stay on the GPU" in caplog.text
    eng.wake_up()  # nothing of the weights to resume
    eng.generate(batch, params)
    assert _kinds(client) == [("release", ["kv_cache", "cuda_graph"]), ("resume", ["kv_cache", "cuda_graph"]), ("generate",)]
    # a policy engine: once synced, a sleep releases everything and the next sync reloads the weights
    eng.load_weights(_weights(model_dir).items())
    client.calls.clear()
    eng.sleep()
    eng.wake_up()
    with pytest.raises(RuntimeError, match="released this engine's weights without a host copy .* no weight sync has loaded them since"):
        eng.generate(batch, params)
    assert _kinds(client) == [("release", ALL), ("resume", ["weights"])]  # nothing generated, the KV cache left released
    with pytest.raises(RuntimeError, match="without a host copy"):  # the same without the wake-up
        eng.generate(batch, params)
    eng.load_weights(_weights(model_dir).items())
    eng.generate(batch, params)
    assert _kinds(client)[2:] == [("sync",), ("resume", ["kv_cache", "cuda_graph"]), ("generate",)]
    # a failed sync leaves them unusable
    client.fail_update = True
    eng.sleep()
    with pytest.raises(RuntimeError, match="update_weights_from_tensor failed"):
        eng.load_weights(_weights(model_dir).items())
    with pytest.raises(RuntimeError, match="without a host copy"):
        eng.generate(batch, params)


def test_without_a_host_copy_lora_adapter_syncs_keep_the_base_weights(model_dir):
    """LoRA adapter syncs send the base weights once: without a host copy a sleep must not drop them."""
    client = RecordingClient()
    eng = _adapter(model_dir, client, "model.lora_rank=8", "rollout.engine_kwargs.enable_weights_cpu_backup=false",
                   context=WorkerContext(device="cuda"))
    assert eng.lora_rank
    eng.load_weights(_weights(model_dir).items())  # the base, once
    client.calls.clear()
    eng.sleep()
    eng.wake_up()
    assert _kinds(client) == [("release", ["kv_cache", "cuda_graph"])]


def test_the_in_process_engine_keeps_its_pinned_weight_copy(model_dir, monkeypatch):
    """torch_memory_saver pins a new host buffer for the weights at every release and frees it at every resume unless
    TMS_RETAIN_CPU_BACKUP=1 is in the environment SGLang's processes start with: set where the backup is on and unset."""
    import os

    from rl_rollout_sglang import clients

    seen = []

    class Engine:
        context_length = 64

        def __init__(self, args):
            seen.append((args.get("enable_weights_cpu_backup"), os.environ.get(sglang_quirks.RETAIN_BACKUP_ENV)))

    monkeypatch.setattr(clients, "InProcessClient", Engine)
    for overrides, user in (((), None), (("rollout.engine_kwargs.enable_weights_cpu_backup=false",), None), ((), "0")):
        monkeypatch.delenv(sglang_quirks.RETAIN_BACKUP_ENV, raising=False)
        if user is not None:
            monkeypatch.setenv(sglang_quirks.RETAIN_BACKUP_ENV, user)
        _adapter(model_dir, None, *overrides, context=WorkerContext(device="cuda"))
    assert seen == [(True, "1"), (False, None), (True, "0")]  # the user's setting wins


def test_shutdown_leaves_a_borrowed_client_alone_and_refuses_more_work(model_dir):
    client = RecordingClient()
    eng = _adapter(model_dir, client)
    eng.shutdown()
    assert ("shutdown",) not in client.calls
    with pytest.raises(RuntimeError, match="after shutdown"):
        eng.generate(prompt_batch(model_dir, ("ab",)), SamplingParams(n=1, max_new_tokens=2))


def test_engine_args_defaults_and_overrides(model_dir, monkeypatch):
    for key in ("SGLANG_USE_CPU_ENGINE", "SGLANG_CPU_OMP_THREADS_BIND", sglang_quirks.SEEDED_SAMPLING_ENV):
        monkeypatch.delenv(key, raising=False)
    eng = _adapter(model_dir, RecordingClient(), "rollout.tensor_model_parallel_size=2", "rollout.engine_kwargs.chunked_prefill_size=128")
    args = eng.engine_args({"chunked_prefill_size": 128})
    assert args["device"] == "cpu" and args["dtype"] == "float32" and args["tp_size"] == 2
    assert args["mem_fraction_static"] == 0.3 and args["max_total_tokens"] == 16384  # slack for the memory reading; KV cap
    assert args["disable_overlap_schedule"] and args["skip_tokenizer_init"]
    assert args["context_length"] == 40 and args["chunked_prefill_size"] == 128
    import os

    assert os.environ["SGLANG_USE_CPU_ENGINE"] == "1" and os.environ[sglang_quirks.SEEDED_SAMPLING_ENV] == "1"
    assert os.environ["SGLANG_CPU_OMP_THREADS_BIND"].count("|") == 1
    gpu = _adapter(model_dir, RecordingClient(), "rollout.gpu_memory_utilization=0.6", context=WorkerContext(device="cuda", local_rank=3))
    g = gpu.engine_args({})
    assert g["device"] == "cuda" and g["mem_fraction_static"] == 0.6 and g["base_gpu_id"] == 3 and g["enable_memory_saver"]
    # released weights come back only from SGLang's host copy: on with sleep, the user's choice wins, off without sleep
    assert g["enable_weights_cpu_backup"] is True
    assert gpu.engine_args({"enable_weights_cpu_backup": False})["enable_weights_cpu_backup"] is False
    awake = _adapter(model_dir, RecordingClient(), "rollout.enable_sleep=false", context=WorkerContext(device="cuda"))
    assert "enable_weights_cpu_backup" not in awake.engine_args({}) and not awake.engine_args({})["enable_memory_saver"]


# ------------------------------------------------------------------ quirks
def test_cpu_thread_binding_splits_the_cores(monkeypatch):
    monkeypatch.delenv("SGLANG_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(sglang_quirks.os, "cpu_count", lambda: 8)
    done = sglang_quirks.configure_cpu_environment(2)
    assert done["SGLANG_CPU_OMP_THREADS_BIND"] == "0-3|4-7"
    monkeypatch.setenv("SGLANG_CPU_OMP_THREADS_BIND", "0|1")
    assert "SGLANG_CPU_OMP_THREADS_BIND" not in sglang_quirks.configure_cpu_environment(2)  # the user's setting wins


def test_weight_update_session_brackets_only_where_supported():
    client = RecordingClient()
    with sglang_quirks.weight_update_session(client):
        client.calls.append(("inside",))
    assert client.calls == [("begin",), ("inside",), ("end",)]

    class Old:
        pass

    with sglang_quirks.weight_update_session(Old()):
        pass

    # the in-process client over an engine without the session calls (SGLang 0.5.17, the GPU image's): a sync goes
    # through with nothing bracketed; over one that has them (0.5.23) both are called
    from rl_rollout_sglang.clients import InProcessClient

    calls = []

    class Engine017:
        def update_weights_from_tensor(self, named_tensors, flush_cache):
            calls.append(("update", [n for n, _ in named_tensors]))

    class Engine023(Engine017):
        def begin_weight_update(self):
            calls.append(("begin",))

        def end_weight_update(self):
            calls.append(("end",))

    for engine in (Engine017(), Engine023()):
        client = InProcessClient.__new__(InProcessClient)
        client.engine = engine
        with sglang_quirks.weight_update_session(client):
            client.update_weights_from_tensor([("w", None)], flush_cache=False)
    assert calls == [("update", ["w"]), ("begin",), ("update", ["w"]), ("end",)]


def test_check_result_forms():
    for ok in (None, (True, ""), {"success": True}, type("R", (), {"success": True, "message": ""})()):
        sglang_quirks.check_result(ok, "x")
    for bad in ((False, "no"), {"success": False, "message": "no"}, type("R", (), {"success": False, "message": "no"})()):
        with pytest.raises(RuntimeError, match="SGLang x failed: no"):
            sglang_quirks.check_result(bad, "x")


def test_hash32_is_deterministic_and_spread():
    seeds, pos, cols = torch.tensor([1, 2, 2**40 + 5], dtype=torch.uint64), torch.tensor([0, 3, 3]), torch.arange(4096)
    a = sglang_quirks.hash32(seeds, pos, cols)
    assert torch.equal(a, sglang_quirks.hash32(seeds, pos, cols))
    assert a.shape == (3, 4096) and a.min() >= 0 and a.max() < 2**32
    assert not torch.equal(a[1], a[2])  # seeds differing only in the high 32 bits
    u = a.double() / 2**32
    assert abs(u.mean().item() - 0.5) < 0.02 and abs(u.std().item() - 12**-0.5) < 0.02  # about uniform


def test_seed_hook_fills_seeds_only_when_sglang_left_them_out():
    from types import SimpleNamespace as NS

    batch = NS(reqs=[NS(sampling_params=NS(sampling_seed=5)), NS(sampling_params=NS(sampling_seed=9))])
    info = NS(sampling_seed=None, temperatures=torch.ones(2, 1))
    assert sglang_quirks._add_request_seeds(info, object, batch, 100).sampling_seed.tolist() == [5, 9]
    unseeded = NS(reqs=[NS(sampling_params=NS(sampling_seed=None))])
    assert sglang_quirks._add_request_seeds(NS(sampling_seed=None, temperatures=torch.ones(1, 1)), unseeded, 100).sampling_seed is None
    filled = NS(sampling_seed=torch.tensor([1, 2]), temperatures=torch.ones(2, 1))
    assert sglang_quirks._add_request_seeds(filled, batch, 100).sampling_seed.tolist() == [1, 2]


def test_sglang_plugin_is_inert_without_its_variable(monkeypatch):
    monkeypatch.delenv(sglang_quirks.SEEDED_SAMPLING_ENV, raising=False)
    sglang_quirks.sglang_plugin()  # returns before importing SGLang (not installed in the main venv)


# ----------------------------------------------------------- server client
class _FakeServer(BaseHTTPRequestHandler):
    log: list = []

    def _reply(self, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 - http.server's naming
        type(self).log.append(("GET", self.path, None))
        self._reply({"tp_size": 1} if self.path == "/server_info" else {"context_length": 48})

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        type(self).log.append(("POST", self.path, body))
        if self.path == "/generate":
            lps = [[-0.5, 9, None], [-1.5, 2, None]]
            self._reply([{"text": "..", "meta_info": {"output_token_logprobs": lps, "finish_reason": {"type": "stop"}}} for _ in body["input_ids"]])
        else:
            self._reply({"success": True, "message": ""})

    def log_message(self, *args):
        pass


def test_server_without_the_session_routes_syncs_without_them():
    """A 0.5.17 server has no /begin_weight_update: its 404 means no session (and no end call); other errors raise."""
    client = ServerClient.__new__(ServerClient)
    sent = []

    def request(path, payload):
        sent.append(path)
        if path == "/begin_weight_update":
            raise RuntimeError(f"SGLang server http://x{path} answered HTTP {status}: Not Found")
        return {"success": True}

    client._request = request
    status = 404
    with sglang_quirks.weight_update_session(client):
        client.flush_cache()
    assert sent == ["/begin_weight_update", "/flush_cache"]
    status = 500
    with pytest.raises(RuntimeError, match="HTTP 500"):
        client.begin_weight_update()


def test_server_client_maps_requests_and_answers(model_dir):
    server = HTTPServer(("127.0.0.1", 0), _FakeServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _FakeServer.log = []
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        eng = _adapter(model_dir, None, f"rollout.engine_kwargs.server_url={url}")
        assert isinstance(eng.client, ServerClient) and eng.context_len == 48
        out = eng.generate(prompt_batch(model_dir, ("ab",)), SamplingParams(n=2, max_new_tokens=3, temperature=1.0, seed=1))
        assert out.tensors["responses"].tolist() == [[9, 2, 0]] * 2
        eng.client.flush_cache()
        eng.client.release_memory_occupation(["kv_cache", "weights"])
        eng.client.resume_memory_occupation()
        assert not eng.weights_backup  # the server's /server_info does not say it keeps a host copy
        eng.shutdown()  # a server is not ours to stop
    finally:
        server.shutdown()
    posts = [(p, b) for m, p, b in _FakeServer.log if m == "POST"]
    # the prompt prefilled once (no new token), then its two samples
    assert posts[0][0] == "/generate" and [s["max_new_tokens"] for s in posts[0][1]["sampling_params"]] == [0]
    assert posts[1][0] == "/generate" and posts[1][1]["return_logprob"] is True  # ids ride in the log-probs
    assert [s["sampling_seed"] for s in posts[1][1]["sampling_params"]] == [1, 2]
    assert posts[-3][0] == "/flush_cache"
    # SGLang's region tags in the body (0.5.17 and 0.5.23 alike); none: every region
    assert posts[-2:] == [("/release_memory_occupation", {"tags": ["kv_cache", "weights"]}), ("/resume_memory_occupation", {})]


def test_unreachable_server_is_a_clear_error(model_dir):
    with pytest.raises(EngineStartError, match=r"cannot reach the SGLang server at http://127.0.0.1:9 .*rollout.engine_kwargs.server_url"):
        _adapter(model_dir, None, "rollout.engine_kwargs.server_url=http://127.0.0.1:9")
