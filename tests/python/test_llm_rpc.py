# SPDX-License-Identifier: Apache-2.0
"""kiln.llm over RPC (issue 36 item 5): the tiny Llama's library and weight folder uploaded to a
loopback `kiln rpc-server` by kiln.llm_remote.RemoteRuntime and generated there, by the session's
own process, which loads libkiln_llm.so as a builtin library (docs/architecture.md, "Builtin
libraries"). The remote tokens equal TVM's (tests/llm/tvm_reference.py) and local Kiln's.

Also: a weight folder missing its shard is the server's error naming the file, and the session
stays usable; a session process without libkiln_llm (not listed in KILN_BUILTIN_LIBRARIES, or
not a loadable library) answers every LLM builtin with an error naming libkiln_llm.so and why.
The model tests skip without apache-tvm (the model is compiled by TVM); the builtin-library
tests need no TVM."""

import re
import shutil
import sys

import numpy as np
import pytest

import kiln
import kiln.llm
from conftest import REPO, Process, free_port, wait_for_port
from kiln.llm_remote import RemoteRuntime

sys.path.insert(0, str(REPO / "tests" / "llm"))

import tvm_reference  # noqa: E402  (tests/llm/, on the path above)



@pytest.fixture
def server(tmp_path, monkeypatch):
    """A factory: server(env={...}, extra=(args...)) starts a `kiln rpc-server` (sessions in processes of their
    own, the default) with `env` added to its environment on a free loopback port; returns
    (port, process). Stopped after the test."""
    started = []

    def start(env=None, extra=()):
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        port = free_port()
        p = Process("rpc-server", "--host", "127.0.0.1", "--port", str(port), "--port-end",
                    str(port + 1), "--work-dir", str(tmp_path / f"server{len(started)}"), *extra)
        started.append(p)
        wait_for_port(port, p.process)
        return port, p

    yield start
    for p in started:
        p.stop()


def _connect(port):
    return kiln.rpc.connect("127.0.0.1", port)


def _remote_engine(fixture_dir, session, **kwargs):
    return tvm_reference.make_engine(str(fixture_dir), "llvm", "cpu",
                                     runtime=RemoteRuntime(session, **kwargs))


# ---- remote generation --------------------------------------------------------------------------


def test_remote_generation_equals_tvm_and_local_kiln(llm_fixture_dir, server):
    reference = tvm_reference.load_reference(str(llm_fixture_dir))
    local = tvm_reference.make_engine(str(llm_fixture_dir), "llvm", "cpu")
    port, _ = server()
    with _connect(port) as session:
        remote = _remote_engine(llm_fixture_dir, session)
        # Every scenario of TVM's reference (batches, fork, popn, page boundaries, chunked
        # prefill, top-p): the board's tokens are TVM's, its logits within 1e-4.
        for name, scenario in tvm_reference.SCENARIOS.items():
            got = scenario(remote)
            assert not remote.sequences, f"{name} left sequences {remote.sequences}"
            for label, (tokens, logits) in reference[name].items():
                got_tokens, got_logits = got[label]
                assert got_tokens == tokens, f"{name}/{label}: {got_tokens} != TVM's {tokens}"
                diff = float(np.abs(np.asarray(got_logits) - logits).max()) if logits.size else 0
                assert diff <= 1e-4, f"{name}/{label}: logits differ from TVM's by {diff}"
        # The same calls, local and remote: the same tokens and logits.
        prompt = tvm_reference.prompt(9, salt=3)
        for method, options in (("greedy", {}), ("top_p", {"top_p": 0.9, "seed": 5})):
            here = local.generate(prompt, 10, method, **options)
            there = remote.generate(prompt, 10, method, **options)
            assert there.tokens == here.tokens, f"{method}: remote {there.tokens} != local"
            np.testing.assert_allclose(there.logits, here.logits, rtol=0, atol=1e-6)
        # Forward passes ran on the server's device.
        assert str(remote.device).startswith("remote"), remote.device


def test_uploads_go_to_fresh_folders_and_the_weights_are_removed_after_loading(
        llm_fixture_dir, server):
    port, _ = server()
    with _connect(port) as session:
        first = _remote_engine(llm_fixture_dir, session)
        second = _remote_engine(llm_fixture_dir, session, keep_weights=True)
        folders = session.listdir("kiln-llm")
        assert len(folders) == 3, folders  # two libraries, one kept weight folder
        kept = [f for f in folders if "params/" in session.listdir(f"kiln-llm/{f}")]
        assert len(kept) == 1, folders
        assert sorted(session.listdir(f"kiln-llm/{kept[0]}params")) == [
            "params_shard_0.bin", "tensor-cache.json"]
        # Both engines work on the one session, each with its own cache.
        prompt = tvm_reference.prompt(6)
        assert first.generate(prompt, 4).tokens == second.generate(prompt, 4).tokens


# ---- bad input ----------------------------------------------------------------------------------


def test_a_weight_folder_missing_its_shard_is_the_servers_error_naming_the_file(
        llm_fixture_dir, server, tmp_path):
    broken = tmp_path / "params"
    shutil.copytree(llm_fixture_dir / "params", broken)
    shards = sorted(broken.glob("params_shard_*.bin"))
    assert shards, "the fixture's tensor cache has no shard"
    shards[0].unlink()
    port, _ = server()
    with _connect(port) as session:
        runtime = RemoteRuntime(session)
        with pytest.raises(kiln.RPCError, match=rf"params/{shards[0].name} is missing"):
            kiln.llm.Engine(str(llm_fixture_dir / "llvm" / "lib.so"), str(broken), "cpu",
                            runtime=runtime, **tvm_reference.CACHE)
        # Nothing half-loaded stays behind, and the session goes on: the complete folder loads.
        assert all("params/" not in session.listdir(f"kiln-llm/{f}")
                   for f in session.listdir("kiln-llm"))
        engine = _remote_engine(llm_fixture_dir, session)
        assert len(engine.generate(tvm_reference.prompt(5), 3).tokens) == 3


def test_remote_runtime_refuses_what_is_not_a_session_or_a_relative_folder(server):
    with pytest.raises(TypeError, match="expected a kiln.rpc.RPCSession"):
        RemoteRuntime("127.0.0.1:9090")
    port, _ = server()
    with _connect(port) as session:
        for folder in ("/tmp/x", "../x", ""):
            with pytest.raises(ValueError, match="must be a relative path"):
                RemoteRuntime(session, folder=folder)
        runtime = RemoteRuntime(session)
        with pytest.raises(FileNotFoundError, match="no model library"):
            runtime.load_vm("/nonexistent/lib.so", runtime.device("cpu"))
        with pytest.raises(ValueError, match="'type' or 'type:id'"):
            runtime.device("cpu:first")


# ---- the session process's builtin libraries (no TVM needed) ------------------------------------


def _call_fails_naming_libkiln_llm(session, name, why):
    with pytest.raises(kiln.RPCError) as err:
        session.get_function(name)()
    message = str(err.value)
    assert f"'{name}' is a builtin of libkiln_llm.so" in message, message
    assert why in message, message


def test_the_session_process_loads_libkiln_llm_and_says_so_at_debug_level(server):
    port, process = server({"KILN_LOG": "debug"})
    with _connect(port) as session:
        names = kiln._kiln._llm_builtin_names()
        for name in names:
            session.get_function(name)  # registered in the session's process
        # A real builtin, not a stub: a bad argument is its own error.
        with pytest.raises(kiln.RPCError, match="vm.builtin.tensor_cache.load") as err:
            session.get_function("vm.builtin.tensor_cache.load")("no-such-folder", 1, 0)
        assert "libkiln_llm.so (Kiln's LLM runtime)" not in str(err.value)
    process.stop()
    log = process.process.stdout.read()
    # Where it came from (beside libkiln) and what it added.
    assert re.search(r"builtin-libraries: loaded libkiln_llm\.so \(/\S+/libkiln_llm\.so\): "
                     rf"{len(names)} new global functions", log), log


def test_without_libkiln_llm_every_llm_builtin_names_the_library(server):
    # Listed libraries replace the default: libkiln_llm.so is then not loaded.
    port, _ = server({"KILN_BUILTIN_LIBRARIES": "/nonexistent/libvendor_attention.so"})
    with _connect(port) as session:
        # Every builtin libkiln_llm registers has its stub in core's list (builtin_libraries.cc).
        for name in kiln._kiln._llm_builtin_names():
            _call_fails_naming_libkiln_llm(
                session, name, "$KILN_BUILTIN_LIBRARIES ('/nonexistent/libvendor_attention.so') "
                "does not list it")
        # The session goes on.
        assert session.get_function("vm.builtin.reshape") is not None


def test_a_libkiln_llm_that_does_not_load_is_named_with_the_loaders_reason(server, tmp_path):
    fake = tmp_path / "libkiln_llm.so"
    fake.write_text("not an ELF file\n")
    port, _ = server({"KILN_BUILTIN_LIBRARIES": str(fake)})
    with _connect(port) as session:
        _call_fails_naming_libkiln_llm(session, "vm.builtin.paged_attention_kv_cache_create",
                                       "dlopen failed")


def test_an_empty_list_loads_no_builtin_library(server):
    port, _ = server({"KILN_BUILTIN_LIBRARIES": ""})
    with _connect(port) as session:
        _call_fails_naming_libkiln_llm(session, "vm.builtin.kv_state_add_sequence",
                                       "$KILN_BUILTIN_LIBRARIES ('') does not list it")


def test_the_remote_kv_cache_is_charged_to_the_sessions_memory(llm_fixture_dir, server):
    """The cache's pages are device memory the session holds for the client: with room for the
    weights but not for the pages, the session refuses the cache with its budget's error; with
    room for both it generates."""
    weights = sum(f.stat().st_size for f in (llm_fixture_dir / "params").glob("*.bin"))
    # layers x pages x K/V x KV heads x page x head dim x float32, for the fixture's cache
    # (tvm_reference.CACHE: 512 tokens in pages of 16, plus one)
    pages = 3 * (512 // 16 + 1) * 2 * 2 * 16 * 16 * 4
    port, _ = server(extra=("--max-session-memory", str(weights + pages // 2)))
    with _connect(port) as session:
        with pytest.raises(kiln.RPCError, match="would exceed the memory limit"):
            _remote_engine(llm_fixture_dir, session)
    port, _ = server(extra=("--max-session-memory", str(weights + 2 * pages)))
    with _connect(port) as session:
        remote = _remote_engine(llm_fixture_dir, session)
        assert len(remote.generate(tvm_reference.prompt(8), 4).tokens) == 4
