# SPDX-License-Identifier: Apache-2.0
"""Kiln's sampling and logit-processing builtins (llm/src/sampling.cc, issue 36 item 3) against
TVM 0.27's own (src/runtime/vm/lm_support.cc), called by the same names with the same inputs and
uniforms: the same token ids, and processed logits and probabilities equal bit for bit.

The inputs are random (several seeds, batch sizes and vocabulary sizes up to 32000), with ties
(integer logits, flat distributions: the token then depends on the sort's order of equal
values), masked (-inf) tokens, zeros, sharp and flat distributions (both paths of
sample_top_p_from_prob) and samples next to 1 (multinomial's fall-through to the last token).
The comparisons skip, naming why, when apache-tvm cannot be imported; the bad-input checks run
without it."""

import numpy as np
import pytest

import kiln
from conftest import have_tvm

needs_tvm = pytest.mark.skipif(
    not have_tvm(), reason="apache-tvm is not importable (tools/dev.sh test installs 0.27 into "
    "build/.venv-tvm): the comparison with TVM's builtins needs it")

SEEDS = [0, 1, 2]
VOCABS = [1, 2, 7, 100, 1000, 32000]


def both(name):
    """(Kiln's builtin, TVM's builtin) of one name."""
    import tvm
    return kiln.get_global_func(name), tvm.get_global_func(name)


def tvm_tensor(array):
    import tvm
    return tvm.runtime.tensor(np.ascontiguousarray(array))


def bits(array):
    """The float32 bit patterns (so that -0.0 != 0.0 and NaN == NaN compare as TVM wrote them)."""
    return np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)


def logit_rows(rng, vocab):
    """Rows of logits (1, vocab): Gaussian at two scales, integers (many ties), and masked."""
    rows = [rng.standard_normal(vocab) * 2, rng.standard_normal(vocab) * 8,
            rng.integers(-3, 3, vocab).astype(np.float64)]
    masked = rng.standard_normal(vocab) * 3
    if vocab > 1:
        masked[rng.random(vocab) < 0.5] = -np.inf
        masked[rng.integers(vocab)] = 1.0  # at least one token left
    rows.append(masked)
    return [r.astype(np.float32).reshape(1, vocab) for r in rows]


def softmax(row, temperature=1.0):
    z = row.astype(np.float64) / temperature
    z = np.exp(z - z.max())
    return (z / z.sum()).astype(np.float32)


def prob_rows(rng, vocab):
    """Rows of probabilities (1, vocab): sharp, ordinary, flat (every value tied), and sparse."""
    rows = [softmax(rng.standard_normal(vocab) * 8), softmax(rng.standard_normal(vocab)),
            np.full(vocab, 1.0 / vocab)]
    sparse = softmax(rng.standard_normal(vocab) * 2)
    if vocab > 1:
        sparse[rng.random(vocab) < 0.6] = 0.0
        sparse[rng.integers(vocab)] = 0.25
    rows.append(sparse)
    return [np.asarray(r, np.float32).reshape(1, vocab) for r in rows]


def uniforms(rng, n):
    """n samples in [0, 1), including 0 and the largest float32 and float64 below 1."""
    edge = [0.0, float(np.nextafter(np.float32(1), np.float32(0))), float(np.nextafter(1.0, 0.0))]
    return edge + [float(u) for u in rng.random(n)]


# ---- samplers ------------------------------------------------------------------------------------


@needs_tvm
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("vocab", VOCABS)
def test_sample_top_p_from_logits_matches_tvm(seed, vocab):
    ours, theirs = both("vm.builtin.sample_top_p_from_logits")
    rng = np.random.default_rng(seed)
    big = vocab >= 1000
    temperatures = [0.0, 1e-7, 0.7, 1.3] if big else [0.0, 1e-7, 0.3, 0.7, 1.0, 1.5, 10.0]
    top_ps = [0.1, 0.9, 1.0] if big else [0.05, 0.3, 0.5, 0.8, 0.9, 0.95, 1.0]
    for row in logit_rows(rng, vocab):
        t_row = tvm_tensor(row)
        for temperature in temperatures:
            for top_p in top_ps:
                for u in uniforms(rng, 3 if big else 10):
                    got = ours(row, temperature, top_p, u)
                    want = theirs(t_row, temperature, top_p, u)
                    assert got == want, (vocab, temperature, top_p, u)
                    assert 0 <= got < vocab


@needs_tvm
@pytest.mark.parametrize("seed", SEEDS)
def test_sample_top_p_from_logits_ties_follow_tvms_sort(seed):
    """Many equal logits: which one is drawn depends on std::sort's order of equal values."""
    ours, theirs = both("vm.builtin.sample_top_p_from_logits")
    rng = np.random.default_rng(seed)
    not_lowest = 0  # greedy picks that are not the lowest index of the max (numpy's argmax)
    for vocab in [3, 16, 17, 50, 1000]:
        row = rng.integers(0, 2, vocab).astype(np.float32).reshape(1, vocab)
        t_row = tvm_tensor(row)
        not_lowest += theirs(t_row, 0.0, 1.0, 0.0) != int(np.argmax(row))
        for temperature in [0.0, 1.0]:
            got = [ours(row, temperature, 1.0, u) for u in np.linspace(0, 0.999, 200)]
            want = [theirs(t_row, temperature, 1.0, u) for u in np.linspace(0, 0.999, 200)]
            assert got == want, vocab
    # The case discriminates: a sort that kept equal values in index order would fail it.
    assert not_lowest > 0


@needs_tvm
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("vocab", VOCABS)
def test_sample_top_p_from_prob_matches_tvm(seed, vocab):
    ours, theirs = both("vm.builtin.sample_top_p_from_prob")
    rng = np.random.default_rng(seed)
    big = vocab >= 1000
    top_ps = [0.1, 0.9, 1.0] if big else [0.05, 0.3, 0.5, 0.8, 0.9, 0.95, 1.0]
    for row in prob_rows(rng, vocab):
        t_row = tvm_tensor(row)
        for top_p in top_ps:
            for u in uniforms(rng, 5 if big else 20):
                got = ours(row, top_p, u)
                assert got == theirs(t_row, top_p, u), (vocab, top_p, u)
                assert 0 <= got < vocab and row[0, got] > 0


@needs_tvm
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("vocab", [1, 7, 1000, 32000])
def test_multinomial_from_uniform_matches_tvm(seed, batch, vocab):
    ours, theirs = both("vm.builtin.multinomial_from_uniform")
    rng = np.random.default_rng(seed)
    prob = np.stack([softmax(rng.standard_normal(vocab) * s) for s in rng.uniform(0.1, 6, batch)])
    for _ in range(5):
        u = rng.random((batch, 1)).astype(np.float32)
        u[0, 0] = np.nextafter(np.float32(1), np.float32(0))  # past the float32 sum: last token
        if batch > 1:
            u[1, 0] = 0.0
        got = ours(prob, u)
        want = theirs(tvm_tensor(prob), tvm_tensor(u)).numpy()
        got = np.asarray(got)
        assert got.dtype == np.int64 and got.shape == (batch, 1)
        assert np.array_equal(got, want)


# ---- logit processing (in place) ---------------------------------------------------------------


@needs_tvm
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("vocab", VOCABS)
def test_apply_softmax_with_temperature_matches_tvm_bit_for_bit(seed, vocab):
    ours, theirs = both("vm.builtin.apply_softmax_with_temperature")
    rng = np.random.default_rng(seed)
    rows = logit_rows(rng, vocab)
    rows.append(rows[0] - np.float32(60))  # all negative: TVM's max starts at FLT_MIN
    rows.append(rows[0] - np.float32(95))  # and subnormal terms
    for row in rows:
        for temperature in [0.25, 0.7, 1.0, 2.0, 3.3]:
            mine = row.copy()
            t_row = tvm_tensor(row)
            theirs(t_row, temperature)
            want = t_row.numpy()
            if np.isnan(want).any():  # TVM's NaNs for rows it cannot normalise: Kiln refuses
                with pytest.raises(ValueError, match="apply_softmax_with_temperature"):
                    ours(mine, temperature)
                assert np.array_equal(bits(mine), bits(row))
                continue
            ours(mine, temperature)
            assert np.array_equal(bits(mine), bits(want)), (vocab, temperature)


@needs_tvm
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("vocab", VOCABS)
def test_apply_repetition_penalty_matches_tvm_bit_for_bit(seed, vocab):
    ours, theirs = both("vm.builtin.apply_repetition_penalty")
    rng = np.random.default_rng(seed)
    row = (rng.standard_normal(vocab) * 4).astype(np.float32).reshape(1, vocab)
    row[0, rng.random(vocab) < 0.1] = 0.0
    for penalty in [0.5, 1.0, 1.1, 1.3, 2.0, 7.5]:
        ids = rng.integers(0, vocab, rng.integers(0, 64)).astype(np.int32)  # repeats included
        mine = row.copy()
        ours(mine, ids, penalty)
        t_row = tvm_tensor(row)
        theirs(t_row, tvm_tensor(ids), penalty)
        assert np.array_equal(bits(mine), bits(t_row.numpy())), penalty


@needs_tvm
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("vocab", VOCABS)
def test_apply_presence_and_frequency_penalty_matches_tvm_bit_for_bit(seed, vocab):
    ours, theirs = both("vm.builtin.apply_presence_and_frequency_penalty")
    rng = np.random.default_rng(seed)
    row = (rng.standard_normal(vocab) * 4).astype(np.float32).reshape(1, vocab)
    for presence in [-2.0, -0.5, 0.0, 0.3, 2.0]:
        for frequency in [-1.0, 0.0, 0.1, 1.7]:
            n = int(rng.integers(0, min(vocab, 64) + 1))
            ids = rng.choice(vocab, n, replace=False).astype(np.int32)
            freqs = rng.integers(1, 10, n).astype(np.int32)
            mine = row.copy()
            ours(mine, ids, freqs, presence, frequency)
            t_row = tvm_tensor(row)
            theirs(t_row, tvm_tensor(ids), tvm_tensor(freqs), presence, frequency)
            assert np.array_equal(bits(mine), bits(t_row.numpy())), (presence, frequency)


@needs_tvm
def test_a_pipeline_of_builtins_matches_tvm():
    """Penalties, then softmax, then sampling from the probabilities, as a decode step does."""
    import tvm
    rng = np.random.default_rng(7)
    names = ["vm.builtin.apply_repetition_penalty",
             "vm.builtin.apply_presence_and_frequency_penalty",
             "vm.builtin.apply_softmax_with_temperature", "vm.builtin.sample_top_p_from_prob"]
    k = {n: kiln.get_global_func(n) for n in names}
    t = {n: tvm.get_global_func(n) for n in names}
    for _ in range(20):
        logits = (rng.standard_normal(32000) * 3).astype(np.float32).reshape(1, 32000)
        ids = rng.choice(32000, 50, replace=False).astype(np.int32)
        freqs = rng.integers(1, 5, 50).astype(np.int32)
        u = float(rng.random())
        mine, theirs = logits.copy(), tvm_tensor(logits)
        k[names[0]](mine, ids, 1.2)
        t[names[0]](theirs, tvm_tensor(ids), 1.2)
        k[names[1]](mine, ids, freqs, 0.5, 0.3)
        t[names[1]](theirs, tvm_tensor(ids), tvm_tensor(freqs), 0.5, 0.3)
        k[names[2]](mine, 0.8)
        t[names[2]](theirs, 0.8)
        assert np.array_equal(bits(mine), bits(theirs.numpy()))
        assert k[names[3]](mine, 0.9, u) == t[names[3]](theirs, 0.9, u)


# ---- tensors on a device (TVM copies the samplers' inputs to the host) -----------------------------


def test_samplers_copy_device_tensors_to_the_host_and_in_place_ops_refuse_them():
    if kiln.opencl(0) not in kiln.devices():
        pytest.skip("no OpenCL device (the opencl plugin with PoCL or a GPU driver) to put tensors on")
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal(1000) * 3).astype(np.float32).reshape(1, 1000)
    prob = softmax(logits[0]).reshape(1, 1000)
    u = rng.random((1, 1)).astype(np.float32)
    on_device = {name: kiln.tensor(a, device=kiln.opencl(0))
                 for name, a in [("logits", logits), ("prob", prob), ("u", u)]}
    sample = kiln.get_global_func("vm.builtin.sample_top_p_from_logits")
    for x in np.linspace(0, 0.99, 7):
        assert sample(on_device["logits"], 0.8, 0.9, x) == sample(logits, 0.8, 0.9, x)
    from_prob = kiln.get_global_func("vm.builtin.sample_top_p_from_prob")
    assert from_prob(on_device["prob"], 0.9, 0.5) == from_prob(prob, 0.9, 0.5)
    multinomial = kiln.get_global_func("vm.builtin.multinomial_from_uniform")
    got = multinomial(on_device["prob"], on_device["u"])
    assert str(got.device) == "cpu:0"
    assert np.array_equal(np.asarray(got), np.asarray(multinomial(prob, u)))
    with pytest.raises(ValueError, match="apply_softmax_with_temperature: logits must be on the cpu"):
        kiln.get_global_func("vm.builtin.apply_softmax_with_temperature")(on_device["logits"], 1.0)


# ---- bad input: a clear error naming the builtin and the argument (no TVM needed) ---------------


def f32(*values, shape=None):
    a = np.array(values, np.float32)
    return a.reshape(shape) if shape else a.reshape(1, -1)


BAD_INPUTS = [
    # (builtin, args, error type, message fragment)
    ("sample_top_p_from_logits", (f32(1, 2), 1.0, 0.0, 0.5), ValueError, "top_p must be in (0, 1]"),
    ("sample_top_p_from_logits", (f32(1, 2), 1.0, 1.5, 0.5), ValueError, "top_p must be in (0, 1]"),
    ("sample_top_p_from_logits", (f32(1, 2), 1.0, 0.9, 1.0), ValueError,
     "uniform_sample must be in [0, 1)"),
    ("sample_top_p_from_logits", (f32(1, 2), 1.0, 0.9, -0.1), ValueError,
     "uniform_sample must be in [0, 1)"),
    ("sample_top_p_from_logits", (f32(1, np.nan), 1.0, 0.9, 0.5), ValueError, "logits[1] is NaN"),
    ("sample_top_p_from_logits", (np.zeros((1, 0), np.float32), 1.0, 0.9, 0.5), ValueError,
     "logits is empty"),
    ("sample_top_p_from_logits", (np.zeros((1, 2), np.float64), 1.0, 0.9, 0.5), TypeError,
     "logits must be float32, got float64"),
    ("sample_top_p_from_logits", (np.zeros((2, 2), np.float32), 1.0, 0.9, 0.5), ValueError,
     "the leading dimensions of logits must be 1"),
    ("sample_top_p_from_logits", (f32(-np.inf, -np.inf), 1.0, 0.9, 0.5), ValueError,
     "every logit is -inf"),
    ("sample_top_p_from_prob", (f32(0.5, np.nan), 0.9, 0.5), ValueError, "prob[1]"),
    ("sample_top_p_from_prob", (f32(0.5, -0.5), 0.9, 0.5), ValueError, "prob[1]"),
    ("sample_top_p_from_prob", (f32(0, 0), 0.9, 0.5), ValueError, "every probability is 0"),
    ("sample_top_p_from_prob", (f32(0.5, 0.5), 0.9, 1.0), ValueError, "uniform_sample"),
    ("sample_top_p_from_prob", (f32(0.5, 0.5), 0.9), TypeError, "takes 3 arguments, got 2"),
    ("multinomial_from_uniform", (f32(0.5, 0.5), f32(1.0, shape=(1, 1))), ValueError,
     "uniform_sample must be in [0, 1)"),
    ("multinomial_from_uniform", (f32(0.5, 0.5), f32(0.5, 0.5, shape=(2, 1))), ValueError,
     "uniform_sample must be (1, 1)"),
    ("multinomial_from_uniform", (np.zeros((1, 0), np.float32), f32(0.5, shape=(1, 1))),
     ValueError, "prob is empty"),
    ("multinomial_from_uniform", (f32(0.5, 0.5), np.zeros((1, 1), np.float64)), TypeError,
     "uniform_sample must be float32"),
    ("apply_softmax_with_temperature", (f32(1, 2), 0.0), ValueError, "temperature must be > 0"),
    ("apply_softmax_with_temperature", (f32(1, np.nan), 1.0), ValueError, "logits[1] is NaN"),
    ("apply_softmax_with_temperature", (f32(-np.inf, -np.inf), 1.0), ValueError, "underflows"),
    ("apply_repetition_penalty", (f32(1, 2), np.array([2], np.int32), 1.5), IndexError,
     "token_ids[0] = 2 is outside the vocabulary [0, 2)"),
    ("apply_repetition_penalty", (f32(1, 2), np.array([1], np.int64), 1.5), TypeError,
     "token_ids must be int32, got int64"),
    ("apply_repetition_penalty", (f32(1, 2), np.array([1], np.int32), 0.0), ValueError,
     "penalty must be > 0"),
    ("apply_presence_and_frequency_penalty",
     (f32(1, 2), np.array([0, 1], np.int32), np.array([1], np.int32), 0.5, 0.5), ValueError,
     "token_freqs has 1 entries but token_ids has 2"),
    ("apply_presence_and_frequency_penalty",
     (f32(1, 2), np.array([0], np.int32), np.array([0], np.int32), 0.5, 0.5), ValueError,
     "token_freqs[0] = 0 must be >= 1"),
    ("apply_presence_and_frequency_penalty",
     (f32(1, 2), np.array([-1], np.int32), np.array([1], np.int32), 0.5, 0.5), IndexError,
     "token_ids[0] = -1"),
]


@pytest.mark.parametrize("name,args,error,fragment", BAD_INPUTS,
                         ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_builtin_and_argument(name, args, error, fragment):
    before = [a.copy() for a in args if isinstance(a, np.ndarray)]
    with pytest.raises(error) as info:
        kiln.get_global_func(f"vm.builtin.{name}")(*args)
    assert f"vm.builtin.{name}" in str(info.value)
    assert fragment in str(info.value)
    after = [a for a in args if isinstance(a, np.ndarray)]
    for b, a in zip(before, after):  # nothing was written
        assert np.array_equal(b, a, equal_nan=a.dtype.kind == "f")
