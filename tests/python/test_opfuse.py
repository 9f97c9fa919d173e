# tests/python/test_opfuse.py - the Python module: Session on the built-in models, the single
# ops against numpy (float64) and PyTorch, the error paths, the GIL and the per-Session lock.
#
# Tolerances follow src/check/compare.cpp's model, |out - ref| <= atol + rtol * |ref|, through
# numpy's assert_allclose (the same formula; the C++ comparator is not part of the module):
# - whole models, stage against stage: kModelTolerance, atol 1e-5 and rtol 1e-3 (ONNX's
#   backend-test rtol);
# - dot products (conv2d, gemm) of L terms in [-1, 1] against a float64 reference: dot_tol(),
#   compare.cpp's dot_tolerance: r = c * eps * sqrt(L), atol = r * magnitude, rtol = r, with
#   the magnitude of the sum ~ sqrt(L) / 3 (+1 for a bias);
# - elementwise and row ops: a few ulp, explained where used.
import io
import math
import threading
import time

import numpy as np
import pytest

import opfuse

EPS = 2.0**-23  # fp32 unit roundoff, compare.cpp's kEps
MODEL_ATOL, MODEL_RTOL = 1e-5, 1e-3  # compare.hpp's kModelTolerance

try:
    import torch
    import torch.nn.functional as F

    HAVE_TORCH = True
except Exception:  # not installed (python3-torch), or broken
    HAVE_TORCH = False
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="PyTorch is not importable (Debian: python3-torch)")


def dot_tol(L, bias=False, c=4.0):
    r = c * EPS * math.sqrt(max(L, 1))
    return r * (math.sqrt(L) / 3 + (1 if bias else 0) + 1), r


def assert_close(out, ref, atol, rtol, what=""):
    ref = np.asarray(ref)
    # An all-zero reference proves nothing (compare.cpp calls it degenerate).
    assert np.any(ref != 0), f"{what}: degenerate case, the reference is all zero"
    assert out.shape == ref.shape, f"{what}: shape {out.shape}, reference {ref.shape}"
    np.testing.assert_allclose(out, ref, atol=atol, rtol=rtol, err_msg=what)


def uniform(rng, shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


@pytest.fixture
def rng():
    return np.random.default_rng(20)


# ---- module ---------------------------------------------------------------------------------


def test_module_basics():
    assert isinstance(opfuse.__version__, str) and opfuse.__version__.count(".") == 2
    assert set(opfuse.builtin_models()) == {"resnet50", "mobilenet_v2", "bert_layer"}
    assert opfuse.stages == ("naive", "simd", "fused")
    assert opfuse.fusion_levels == ("none", "basic", "advanced", "full")
    assert issubclass(opfuse.InvalidArgumentError, opfuse.Error)
    assert issubclass(opfuse.InvalidArgumentError, ValueError)
    assert issubclass(opfuse.UnsupportedError, NotImplementedError)
    assert issubclass(opfuse.OutOfMemoryError, MemoryError)
    assert issubclass(opfuse.InternalError, RuntimeError)
    assert opfuse.InvalidArgumentError.code == "invalid_argument"


# ---- Session: built-in models ---------------------------------------------------------------


@pytest.fixture(scope="module")
def mobilenet_input():
    return np.random.default_rng(1).uniform(-1, 1, (1, 3, 224, 224)).astype(np.float32)


@pytest.fixture(scope="module")
def mobilenet_outputs(mobilenet_input):
    """The output of mobilenet_v2 at each stage (one Session per stage, reused below)."""
    out = {}
    for stage in opfuse.stages:
        s = opfuse.Session("mobilenet_v2", stage=stage)
        out[stage] = (s, s.run({"input": mobilenet_input})["output"])
    return out


def test_mobilenet_inputs_outputs():
    s = opfuse.Session("mobilenet_v2")
    [x] = s.inputs
    [y] = s.outputs
    assert (x.name, x.shape, x.dtype, x.type) == ("input", [1, 3, 224, 224], np.float32, "tensor(float)")
    assert (y.name, y.shape, y.dtype) == ("output", [1, 1000], np.dtype("float32"))
    assert x.dtype == "float32"
    assert s.get_inputs() == s.inputs and s.get_outputs() == s.outputs
    assert (s.stage, s.fusion, s.threads) == ("fused", "full", 0)
    assert "mobilenet_v2" in repr(s)


def test_mobilenet_stages_agree(mobilenet_outputs):
    ref = mobilenet_outputs["naive"][1]
    assert ref.shape == (1, 1000) and ref.dtype == np.float32
    for stage in ("simd", "fused"):
        assert_close(mobilenet_outputs[stage][1], ref, MODEL_ATOL, MODEL_RTOL, f"mobilenet_v2 {stage} vs naive")


def test_mobilenet_plan_queries(mobilenet_outputs):
    fused = mobilenet_outputs["fused"][0]
    applied = dict(fused.fusions_applied)
    # MobileNetV2's blocks become inverted_residual nodes at fusion level full.
    assert applied.get("inverted_residual_block", 0) > 0
    assert all(isinstance(n, str) and isinstance(c, int) for n, c in fused.fusions_applied)
    assert 0 < fused.node_count < fused.model_node_count
    assert fused.peak_bytes >= fused.weight_bytes > 0
    assert fused.modeled_flops > 0
    assert "inverted_residual" in fused.dump_graph()
    assert fused.cached_shapes == 1


def test_ort_style_run(mobilenet_outputs, mobilenet_input):
    s, ref = mobilenet_outputs["fused"]
    [y] = s.run(None, {"input": mobilenet_input})
    np.testing.assert_array_equal(y, ref)
    [y] = s.run(["output"], {"input": mobilenet_input})
    np.testing.assert_array_equal(y, ref)
    with pytest.raises(opfuse.InvalidArgumentError, match="no output named 'logits'"):
        s.run(["logits"], {"input": mobilenet_input})


def test_fusion_levels_agree(mobilenet_input, mobilenet_outputs):
    ref = mobilenet_outputs["naive"][1]
    s = opfuse.Session("mobilenet_v2", stage="simd", fusion="none", threads=2)
    assert (s.fusion, s.threads) == ("none", 2)
    y = s.run({"input": mobilenet_input})["output"]
    assert all(c == 0 for _, c in s.fusions_applied)
    assert_close(y, ref, MODEL_ATOL, MODEL_RTOL, "mobilenet_v2 simd fusion=none vs naive")


def bert_feed(rng, seq, batch=1):
    h = uniform(rng, (batch, seq, 768))
    mask = np.zeros((batch, 1, 1, seq), np.float32)
    mask[..., seq - 2 :] = -10000.0  # the last two tokens are padding, as an HF mask says
    return {"hidden_states": h, "attention_mask": mask}


def test_bert_inputs_outputs():
    s = opfuse.Session("bert_layer")
    assert [(v.name, v.shape) for v in s.inputs] == [
        ("hidden_states", ["batch", "seq", 768]),
        ("attention_mask", ["batch", 1, 1, "seq"]),
    ]
    assert [(v.name, v.shape, v.dtype) for v in s.outputs] == [("output", ["batch", "seq", 768], np.float32)]
    assert s.metadata["opfuse.default_dims"] == "batch=1,seq=128"


def test_bert_symbolic_seq_stages_agree(rng):
    sessions = {stage: opfuse.Session("bert_layer", stage=stage) for stage in opfuse.stages}
    for seq in (16, 37):
        feed = bert_feed(rng, seq)
        out = {stage: s.run(feed)["output"] for stage, s in sessions.items()}
        assert out["naive"].shape == (1, seq, 768)
        for stage in ("simd", "fused"):
            assert_close(out[stage], out["naive"], MODEL_ATOL, MODEL_RTOL, f"bert_layer seq {seq} {stage} vs naive")
    # One specialization per sequence length, kept in the plan's cache.
    assert sessions["fused"].cached_shapes == 2
    assert dict(sessions["fused"].fusions_applied).get("attention_subgraph", 0) == 1


def test_resnet50_simd_and_fused_agree():
    # The suite's only resnet50 (the largest built-in: its load costs the most), ORT style.
    s = {stage: opfuse.Session("resnet50", stage=stage) for stage in ("simd", "fused")}
    [x] = s["fused"].inputs
    assert (x.name, x.shape) == ("input", [1, 3, 224, 224])
    feed = {x.name: np.random.default_rng(50).uniform(-1, 1, x.shape).astype(np.float32)}
    [ref] = s["simd"].run(None, feed)
    [y] = s["fused"].run(None, feed)
    assert y.shape == (1, 1000)
    assert_close(y, ref, MODEL_ATOL, MODEL_RTOL, "resnet50 fused vs simd")
    assert dict(s["fused"].fusions_applied)["conv_maxpool"] == 1


def test_load_from_bytes_and_file(tmp_path, mobilenet_input, mobilenet_outputs):
    data = opfuse.builtin_bytes("mobilenet_v2")
    assert isinstance(data, bytes) and len(data) > 1000
    ref = mobilenet_outputs["fused"][1]
    from_bytes = opfuse.Session(data).run({"input": mobilenet_input})["output"]
    np.testing.assert_array_equal(from_bytes, ref)
    path = tmp_path / "mobilenet_v2.onnx"
    path.write_bytes(data)
    for model in (str(path), path):  # str and os.PathLike
        y = opfuse.Session(model).run({"input": mobilenet_input})["output"]
        np.testing.assert_array_equal(y, ref)
    y = opfuse.Session(bytearray(data)).run({"input": mobilenet_input})["output"]
    np.testing.assert_array_equal(y, ref)


# ---- Session: how inputs get in ---------------------------------------------------------------


def test_contiguous_float32_is_not_converted(mobilenet_outputs, mobilenet_input):
    s, ref = mobilenet_outputs["fused"]
    assert mobilenet_input.flags.c_contiguous and mobilenet_input.dtype == np.float32
    s.run({"input": mobilenet_input})
    assert s.converted_inputs == []


@pytest.mark.parametrize("variant", ["fortran", "float64", "strided", "list"])
def test_other_arrays_are_converted_correctly(variant, mobilenet_outputs, mobilenet_input):
    s, ref = mobilenet_outputs["fused"]
    x = {
        "fortran": lambda: np.asfortranarray(mobilenet_input),
        "float64": lambda: mobilenet_input.astype(np.float64),
        # Every other element of a wider array: a non-contiguous view with the right shape.
        "strided": lambda: np.repeat(mobilenet_input, 2, axis=3)[..., ::2],
        "list": lambda: mobilenet_input.tolist(),
    }[variant]()
    y = s.run({"input": x})["output"]
    assert s.converted_inputs == ["input"]
    np.testing.assert_array_equal(y, ref)


def test_outputs_are_fresh_arrays(mobilenet_outputs, mobilenet_input):
    s, _ = mobilenet_outputs["fused"]
    a = s.run({"input": mobilenet_input})["output"]
    b = s.run({"input": mobilenet_input})["output"]
    assert a is not b and not np.shares_memory(a, b)
    assert a.flags.c_contiguous and a.flags.writeable and a.flags.owndata


# ---- Session: errors ----------------------------------------------------------------------------


def test_error_bad_file_path(tmp_path):
    path = str(tmp_path / "missing" / "model.onnx")
    with pytest.raises(opfuse.InvalidArgumentError, match="cannot open model file") as e:
        opfuse.Session(path)
    assert path in str(e.value)
    assert e.value.code == "invalid_argument" and e.value.message == str(e.value)


def test_error_garbage_bytes(tmp_path):
    with pytest.raises(opfuse.InvalidArgumentError) as e:
        opfuse.Session(b"this is not an ONNX file")
    assert str(e.value)
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"\x08\x07garbage" * 10)
    with pytest.raises(opfuse.Error, match="garbage.onnx"):
        opfuse.Session(str(path))


def test_error_unknown_builtin():
    with pytest.raises(opfuse.InvalidArgumentError, match="'resnet51' is unknown.*resnet50"):
        opfuse.Session("resnet51")


def test_error_bad_stage_and_fusion():
    with pytest.raises(opfuse.InvalidArgumentError, match="stage 'turbo' is unknown.*naive, simd, fused"):
        opfuse.Session("mobilenet_v2", stage="turbo")
    with pytest.raises(opfuse.InvalidArgumentError, match="fusion level 'max' is unknown.*full"):
        opfuse.Session("mobilenet_v2", fusion="max")
    with pytest.raises(opfuse.InvalidArgumentError, match="threads is -1"):
        opfuse.Session("mobilenet_v2", threads=-1)
    with pytest.raises(opfuse.InvalidArgumentError, match="stage 'turbo'"):
        opfuse.ops.relu(np.ones(4, np.float32), stage="turbo")


def test_error_bad_input_shape(mobilenet_outputs):
    s, _ = mobilenet_outputs["fused"]
    with pytest.raises(opfuse.InvalidArgumentError, match=r"input 'input' dim 3 is 225, the model declares 224"):
        s.run({"input": np.zeros((1, 3, 224, 225), np.float32)})
    with pytest.raises(opfuse.InvalidArgumentError, match=r"input 'input' has rank 3"):
        s.run({"input": np.zeros((3, 224, 224), np.float32)})


def test_error_symbolic_dims_disagree(rng):
    s = opfuse.Session("bert_layer")
    feed = bert_feed(rng, 16)
    feed["attention_mask"] = np.zeros((1, 1, 1, 17), np.float32)
    with pytest.raises(opfuse.InvalidArgumentError, match="'seq'"):
        s.run(feed)


def test_error_wrong_dtype(mobilenet_outputs):
    s, _ = mobilenet_outputs["fused"]
    with pytest.raises(opfuse.InvalidArgumentError, match=r"input 'input' is complex64, expected float32"):
        s.run({"input": np.zeros((1, 3, 224, 224), np.complex64)})
    with pytest.raises(opfuse.InvalidArgumentError, match=r"input 'input' is <U1"):
        s.run({"input": np.full((1, 3, 224, 224), "a")})


def test_error_unknown_and_missing_input(mobilenet_outputs, rng):
    s, _ = mobilenet_outputs["fused"]
    with pytest.raises(opfuse.InvalidArgumentError, match="the model has no input named 'image'"):
        s.run({"image": np.zeros((1, 3, 224, 224), np.float32)})
    bert = opfuse.Session("bert_layer")
    feed = bert_feed(rng, 8)
    del feed["attention_mask"]
    with pytest.raises(opfuse.InvalidArgumentError, match=r"takes 2 inputs \(hidden_states, attention_mask\), 1 given"):
        bert.run(feed)


def test_error_run_arguments(mobilenet_outputs):
    s, _ = mobilenet_outputs["fused"]
    with pytest.raises(TypeError):
        s.run([np.zeros((1, 3, 224, 224), np.float32)])
    with pytest.raises(TypeError):
        s.run({0: np.zeros((1, 3, 224, 224), np.float32)})


# ---- Session: threads -----------------------------------------------------------------------------


def test_two_threads_share_one_session(rng):
    # Two Python threads hammering one Session run in parallel (the GIL is released, each run
    # has its own arena) and must get exactly what serial runs give. Two sequence lengths make
    # the threads switch the plan's specialization under each other too.
    s = opfuse.Session("bert_layer", stage="fused", threads=1)
    feeds = [bert_feed(rng, 16 if i % 2 == 0 else 24) for i in range(8)]
    serial = [s.run(f)["output"] for f in feeds]
    results = [[None] * len(feeds) for _ in range(2)]
    errors = []

    def worker(t):
        try:
            for k in range(3):
                for i in range(len(feeds)):
                    j = (i + t * 3 + k) % len(feeds)  # the threads work on different inputs
                    results[t][j] = s.run(feeds[j])["output"]
        except Exception as e:  # reported below; pytest would not see it in a thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for t in range(2):
        for j, ref in enumerate(serial):
            np.testing.assert_array_equal(results[t][j], ref, f"thread {t} input {j}")


def test_gil_is_released_while_a_kernel_runs(rng):
    # While a worker thread is inside a long naive gemm, the main thread keeps running Python:
    # the longest pause it sees stays far below the gemm's duration (with the GIL held through
    # the kernel, it would stall for all of it).
    a = uniform(rng, (1024, 1024))
    done = threading.Event()
    span = {}

    def worker():
        t0 = time.perf_counter()
        opfuse.ops.gemm(a, a, stage="naive", threads=1)
        span["s"] = time.perf_counter() - t0
        done.set()

    t = threading.Thread(target=worker)
    last = time.perf_counter()
    longest = 0.0
    t.start()
    while not done.is_set():
        now = time.perf_counter()
        longest = max(longest, now - last)
        last = now
    t.join()
    assert span["s"] > 0.05, "the gemm is too short to tell"
    assert longest < span["s"] / 2, f"main thread stalled {longest:.3f} s of a {span['s']:.3f} s kernel"


# ---- single ops -----------------------------------------------------------------------------------


def conv2d_ref(x, w, b=None, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), groups=1):
    """float64 direct convolution: x (N, C, H, W), w (K, C/groups, R, S); pad (top, left, bottom, right)."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    N, C, H, W = x.shape
    K, Cg, R, S = w.shape
    t, l, bo, r = pad
    xp = np.pad(x, ((0, 0), (0, 0), (t, bo), (l, r)))
    P = (H + t + bo - dil[0] * (R - 1) - 1) // stride[0] + 1
    Q = (W + l + r - dil[1] * (S - 1) - 1) // stride[1] + 1
    y = np.zeros((N, K, P, Q))
    Kg = K // groups
    for g in range(groups):
        xs = xp[:, g * Cg : (g + 1) * Cg]
        for rr in range(R):
            for ss in range(S):
                h0, w0 = rr * dil[0], ss * dil[1]
                rows = slice(h0, h0 + stride[0] * (P - 1) + 1, stride[0])
                cols = slice(w0, w0 + stride[1] * (Q - 1) + 1, stride[1])
                patch = xs[:, :, rows, cols]
                y[:, g * Kg : (g + 1) * Kg] += np.einsum("ncpq,kc->nkpq", patch, w[g * Kg : (g + 1) * Kg, :, rr, ss])
    if b is not None:
        y += b.astype(np.float64)[None, :, None, None]
    return y


CONV_CASES = {
    # name: (N, C, H, W, K, R, S, stride, padding, dilation, groups, bias)
    "n1_c3_h7_w7_k5_r3_s1_p1": (1, 3, 7, 7, 5, 3, 3, 1, 1, 1, 1, True),
    "n2_c16_h13_w11_k17_r3_s2_p1": (2, 16, 13, 11, 17, 3, 3, 2, 1, 1, 1, False),
    "n1_c8_h9_w9_k8_r3_dil2_p2": (1, 8, 9, 9, 8, 3, 3, 1, 2, 2, 1, True),
    "n1_c12_h10_w10_k12_dw_s2": (1, 12, 10, 10, 12, 3, 3, 2, 1, 1, 12, True),
    "n1_c32_h14_w14_k64_r1_s1_p0": (1, 32, 14, 14, 64, 1, 1, 1, 0, 1, 1, True),
    "n1_c8_h8_w8_k16_g4_asym_pad": (1, 8, 8, 8, 16, 3, 3, 1, (0, 1, 2, 1), 1, 4, False),
}


def conv_case(rng, case):
    N, C, H, W, K, R, S, stride, padding, dilation, groups, bias = CONV_CASES[case]
    x = uniform(rng, (N, C, H, W))
    w = uniform(rng, (K, C // groups, R, S))
    b = uniform(rng, (K,)) if bias else None
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    pad = padding if isinstance(padding, tuple) else (padding,) * 4
    ref = conv2d_ref(x, w, b, (stride, stride), pad, (dilation, dilation), groups)
    return x, w, b, kw, ref, C // groups * R * S


@pytest.mark.parametrize("stage", opfuse.stages)
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv2d_against_numpy(stage, case, rng):
    x, w, b, kw, ref, L = conv_case(rng, case)
    y = opfuse.ops.conv2d(x, w, b, **kw, stage=stage)
    assert_close(y, ref, *dot_tol(L, b is not None), f"conv2d/{stage}/{case}")
    # relu as a post-op: fused into the store at the fused stage, a separate pass below it.
    y = opfuse.ops.conv2d(x, w, b, **kw, post_ops=["relu"], stage=stage)
    assert_close(y, np.maximum(ref, 0), *dot_tol(L, b is not None), f"conv2d/{stage}/{case}+relu")


@pytest.mark.parametrize("stage", opfuse.stages)
def test_conv2d_post_op_chain(stage, rng):
    # conv + batchnorm + residual add + relu6, then conv + relu + maxpool (the ResNet stem).
    x, w, b, kw, ref, L = conv_case(rng, "n1_c3_h7_w7_k5_r3_s1_p1")
    K = w.shape[0]
    scale, bias = uniform(rng, K, 0.5, 1.5), uniform(rng, K)
    mean, var = uniform(rng, K), uniform(rng, K, 0.5, 2.0)
    res = uniform(rng, ref.shape)
    y = opfuse.ops.conv2d(
        x, w, b, **kw, post_ops=[("batchnorm", scale, bias, mean, var), ("add", res), "relu6"], stage=stage
    )
    c = lambda v: v.astype(np.float64)[:, None, None]
    expect = np.clip((ref - c(mean)) / np.sqrt(c(var) + 1e-5) * c(scale) + c(bias) + res, 0, 6)
    atol, rtol = dot_tol(L, True)
    assert_close(y, expect, atol * 2.2 + 4 * EPS * 6, rtol * 2.2, f"conv2d/{stage}/+bn+add+relu6")
    y = opfuse.ops.conv2d(x, w, b, **kw, post_ops=["relu", ("maxpool", 3, 2, 1)], stage=stage)
    r = np.pad(np.maximum(ref, 0), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    pooled = np.lib.stride_tricks.sliding_window_view(r, (3, 3), axis=(2, 3))[:, :, ::2, ::2].max(axis=(-1, -2))
    assert_close(y, pooled, atol, rtol, f"conv2d/{stage}/+relu+maxpool")


GEMM_CASES = {"1x1x1": (1, 1, 1), "7x13x5": (7, 13, 5), "64x64x64": (64, 64, 64), "33x65x127": (33, 65, 127)}


@pytest.mark.parametrize("stage", opfuse.stages)
@pytest.mark.parametrize("case", sorted(GEMM_CASES))
def test_gemm_against_numpy(stage, case, rng):
    M, N, K = GEMM_CASES[case]
    a, b, bias = uniform(rng, (M, K)), uniform(rng, (K, N)), uniform(rng, (N,))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert_close(opfuse.ops.gemm(a, b, stage=stage), ref, *dot_tol(K), f"gemm/{stage}/{case}")
    # leaky_relu rather than relu: the 1x1x1 case must not come out all zero.
    y = opfuse.ops.gemm(a, b, bias, post_ops=[("leaky_relu", 0.25)], stage=stage)
    z = ref + bias
    assert_close(y, np.where(z >= 0, z, 0.25 * z), *dot_tol(K, True), f"gemm/{stage}/{case}+bias+leaky_relu")
    # Transposed operands, alpha and beta (beta reads `out`, which is also what is returned).
    out = uniform(rng, (M, N))
    expect = 0.5 * ref + 2.0 * out
    y = opfuse.ops.gemm(np.ascontiguousarray(a.T), np.ascontiguousarray(b.T), trans_a=True, trans_b=True,
                        alpha=0.5, beta=2.0, out=out, stage=stage)
    assert y is out
    assert_close(y, expect, dot_tol(K)[0] + 4 * EPS * 2, dot_tol(K)[1], f"gemm/{stage}/{case}/tt")


@pytest.mark.parametrize("stage", opfuse.stages)
def test_activations_and_elementwise(stage, rng):
    x = uniform(rng, (3, 5, 7), -8, 8)  # compare.cpp's activation domain
    erf = np.vectorize(math.erf)
    xd = x.astype(np.float64)
    cases = {
        # One rounding or none: exact up to 1 ulp.
        "relu": (opfuse.ops.relu(x, stage=stage), np.maximum(xd, 0), 0, EPS),
        "relu6": (opfuse.ops.relu6(x, stage=stage), np.clip(xd, 0, 6), 0, EPS),
        "clip": (opfuse.ops.clip(x, -1, 2, stage=stage), np.clip(xd, -1, 2), 0, EPS),
        "leaky_relu": (opfuse.ops.leaky_relu(x, 0.1, stage=stage), np.where(xd >= 0, xd, 0.1 * xd), 0, 2 * EPS),
        # Vector exp/erf/tanh: compare.cpp allows 8-16 ulp (x up to 8).
        "sigmoid": (opfuse.ops.sigmoid(x, stage=stage), 1 / (1 + np.exp(-xd)), 8 * EPS, 8 * EPS),
        "tanh": (opfuse.ops.tanh(x, stage=stage), np.tanh(xd), 8 * EPS, 8 * EPS),
        "silu": (opfuse.ops.silu(x, stage=stage), xd / (1 + np.exp(-xd)), 16 * EPS, 16 * EPS),
        "gelu": (opfuse.ops.gelu(x, stage=stage), 0.5 * xd * (1 + erf(xd / math.sqrt(2))), 16 * EPS, 16 * EPS),
        "gelu_tanh": (
            opfuse.ops.gelu(x, approximate="tanh", stage=stage),
            0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd**3))),
            16 * EPS,
            16 * EPS,
        ),
        "hardswish": (opfuse.ops.hardswish(x, stage=stage), xd * np.clip(xd + 3, 0, 6) / 6, 8 * EPS, 4 * EPS),
    }
    for name, (y, ref, atol, rtol) in cases.items():
        assert y.dtype == np.float32 and y.shape == x.shape
        assert_close(y, ref, atol, rtol, f"{name}/{stage}")
    b = uniform(rng, (5, 1), 0.5, 2.0)  # broadcast along the last dim; divisors >= 0.5
    for name, f in {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}.items():
        y = getattr(opfuse.ops, name)(x, b, stage=stage)
        assert_close(y, f(xd, b.astype(np.float64)), 2 * EPS, 4 * EPS, f"{name}/{stage}")
    # A chain of elementwise steps in one pass.
    y = opfuse.ops.eltwise_chain(x, [("mul", b), ("add", b), "relu"], stage=stage)
    assert_close(y, np.maximum(xd * b + b, 0), 8 * EPS * 8, 4 * EPS, f"eltwise_chain/{stage}")


@pytest.mark.parametrize("stage", opfuse.stages)
def test_rows_norms_pools_attention(stage, rng):
    # softmax: outputs ~1/L, errors a few eps relative (compare.cpp: A * eps with A = 2|scale| + 2).
    x = uniform(rng, (4, 3, 33))
    mask = np.where(rng.uniform(size=(1, 1, 33)) < 0.2, -np.inf, 0).astype(np.float32)
    z = 0.5 * x.astype(np.float64) + mask
    ref = np.exp(z - z.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    y = opfuse.ops.softmax(x, scale=0.5, mask=mask, stage=stage)
    assert_close(y, ref, 16 * EPS / 33, 16 * EPS, f"softmax/{stage}")
    y = opfuse.ops.softmax(x, axis=1, stage=stage)
    e = np.exp(x - x.max(1, keepdims=True))
    assert_close(y, e / e.sum(1, keepdims=True), 16 * EPS / 3, 16 * EPS, f"softmax/{stage}/axis1")

    # layernorm over the last dim (64): mean and variance sums of 64 terms, outputs ~1-3.
    x = uniform(rng, (2, 5, 64))
    res = uniform(rng, x.shape)
    g, bta = uniform(rng, 64, 0.5, 1.5), uniform(rng, 64)
    s = x.astype(np.float64) + res
    ln = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-5) * g + bta
    y, total = opfuse.ops.layernorm(x, g, bta, residual=res, write_sum=True, stage=stage)
    assert_close(y, ln, 64 * EPS, 16 * EPS, f"layernorm/{stage}")
    assert_close(total, s, 0, EPS, f"layernorm/{stage}/sum")
    xd = x.astype(np.float64)
    rms = xd / np.sqrt((xd**2).mean(-1, keepdims=True) + 1e-5) * g
    assert_close(opfuse.ops.rmsnorm(x, g, stage=stage), rms, 64 * EPS, 16 * EPS, f"rmsnorm/{stage}")

    # Pools: max is exact; an average of 9 values rounds a few times.
    x = uniform(rng, (2, 3, 11, 9))
    p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    win = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    assert_close(opfuse.ops.maxpool2d(x, 3, 2, 1, stage=stage), win.max(axis=(-1, -2)), 0, 0, f"maxpool2d/{stage}")
    win = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (2, 2), axis=(2, 3))[:, :, ::2, ::2]
    y = opfuse.ops.avgpool2d(x, 2, stage=stage)
    assert_close(y, win.mean(axis=(-1, -2)), 8 * EPS, 8 * EPS, f"avgpool2d/{stage}")
    gap = opfuse.ops.global_avgpool(x, stage=stage)
    ref = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    assert_close(gap, ref, 16 * EPS, 16 * EPS, f"global_avgpool/{stage}")

    # batchnorm: x * a + (bias - mean * a), terms up to ~5 (compare.cpp: 8 eps * 5).
    x = uniform(rng, (2, 4, 3, 3))
    sc, bi, mu, va = uniform(rng, 4, 0.5, 1.5), uniform(rng, 4), uniform(rng, 4), uniform(rng, 4, 0.5, 2)
    c = lambda v: v.astype(np.float64)[None, :, None, None]
    ref = (x - c(mu)) / np.sqrt(c(va) + 1e-5) * c(sc) + c(bi)
    assert_close(opfuse.ops.batchnorm(x, sc, bi, mu, va, stage=stage), ref, 40 * EPS, 8 * EPS, f"batchnorm/{stage}")

    # attention (B, H, S, D) = (1, 2, 9, 16), causal, default scale 1/sqrt(D).
    q, k, v = (uniform(rng, (1, 2, 9, 16)) for _ in range(3))
    sc = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2) / 4.0
    sc = np.where(np.tril(np.ones((9, 9), bool)), sc, -np.inf)
    pr = np.exp(sc - sc.max(-1, keepdims=True))
    ref = (pr / pr.sum(-1, keepdims=True)) @ v.astype(np.float64)
    y = opfuse.ops.attention(q, k, v, causal=True, stage=stage)
    assert_close(y, ref, 64 * EPS, 64 * EPS, f"attention/{stage}")


def test_ops_out_and_inplace(rng):
    x = uniform(rng, (4, 8))
    out = np.empty_like(x)
    y = opfuse.ops.relu(x, out=out)
    assert y is out
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    # In place (relu allows its output to alias its input).
    before = x.copy()
    y = opfuse.ops.relu(x, out=x)
    assert y is x
    np.testing.assert_array_equal(x, np.maximum(before, 0))


def test_ops_pass_float32_inputs_by_pointer(rng):
    # gemm cannot run in place: handing it its own input as `out` is refused by the library's
    # overlap check, which it can only see when the input buffer is the numpy array itself and
    # not a converted copy. A float64 input is converted, so the same call is then fine.
    a = uniform(rng, (8, 8))
    with pytest.raises(opfuse.InvalidArgumentError, match="output 'y' overlaps input 'a'"):
        opfuse.ops.gemm(a, uniform(rng, (8, 8)), out=a)
    a64 = a.astype(np.float64)
    b = uniform(rng, (8, 8))
    out = np.empty((8, 8), np.float32)
    ref = a64 @ b.astype(np.float64)
    assert_close(opfuse.ops.gemm(a64, b, out=out), ref, *dot_tol(8), "gemm float64 a")


def test_ops_choose_a_kernel(rng):
    rows = opfuse.ops.kernels("conv2d")
    names = [r["name"] for r in rows]
    assert "conv2d__naive" in names and all(r["op"] == "conv2d" for r in rows)
    x, w, b, kw, ref, L = conv_case(rng, "n1_c3_h7_w7_k5_r3_s1_p1")
    y = opfuse.ops.conv2d(x, w, b, **kw, kernel="conv2d__naive")
    assert_close(y, ref, *dot_tol(L, True), "conv2d__naive")
    with pytest.raises(opfuse.InvalidArgumentError, match="kernel 'conv2d__nope' is not in the registry"):
        opfuse.ops.conv2d(x, w, kernel="conv2d__nope")
    levels = ["scalar", "sse2", "avx2", "avx512"]
    above = [r for r in rows if r["isa"] in levels and levels.index(r["isa"]) > levels.index(opfuse.cpu_isa())]
    if above:  # a kernel this CPU cannot run is refused, not run
        with pytest.raises(opfuse.UnsupportedError):
            opfuse.ops.conv2d(x, w, kernel=above[0]["name"])


def test_ops_errors(rng):
    x, w = uniform(rng, (1, 4, 5, 5)), uniform(rng, (2, 3, 3, 3))
    with pytest.raises(opfuse.InvalidArgumentError, match="conv2d: input channels 4 .* weight channels 3") as e:
        opfuse.ops.conv2d(x, w)
    assert isinstance(e.value, ValueError) and e.value.code == "invalid_argument"
    with pytest.raises(opfuse.InvalidArgumentError, match=r"gemm: .*"):
        opfuse.ops.gemm(uniform(rng, (3, 4)), uniform(rng, (5, 6)))
    with pytest.raises(opfuse.InvalidArgumentError, match=r"post_ops\[1\]: unknown post-op 'swishy'"):
        opfuse.ops.conv2d(x, uniform(rng, (2, 4, 3, 3)), post_ops=["relu", "swishy"])
    with pytest.raises(opfuse.InvalidArgumentError, match=r"conv2d: x is complex128, expected float32"):
        opfuse.ops.conv2d(x.astype(np.complex128), w)
    # out of the wrong dtype, shape, or read-only.
    with pytest.raises(opfuse.InvalidArgumentError, match="out must be a C-contiguous float32 ndarray, got float64"):
        opfuse.ops.relu(x, out=np.empty(x.shape))
    with pytest.raises(opfuse.InvalidArgumentError, match="relu"):
        opfuse.ops.relu(x, out=np.empty((1, 4, 5, 4), np.float32))
    ro = np.empty_like(x)
    ro.flags.writeable = False
    with pytest.raises(opfuse.InvalidArgumentError, match="out is read-only"):
        opfuse.ops.relu(x, out=ro)
    with pytest.raises(opfuse.InvalidArgumentError, match="gelu: approximate 'fast'"):
        opfuse.ops.gelu(x, approximate="fast")


def test_ops_convert_float64_and_strided(rng):
    x = rng.uniform(-1, 1, (2, 3, 8, 8))  # float64
    w = uniform(rng, (4, 3, 3, 3))
    ref = conv2d_ref(x.astype(np.float32), w, pad=(1, 1, 1, 1))
    assert_close(opfuse.ops.conv2d(x, w, padding=1), ref, *dot_tol(27), "conv2d float64 input")
    xs = np.asfortranarray(x.astype(np.float32))
    assert_close(opfuse.ops.conv2d(xs, w, padding=1), ref, *dot_tol(27), "conv2d Fortran-order input")


# ---- against PyTorch ------------------------------------------------------------------------------


@needs_torch
@pytest.mark.parametrize("stage", opfuse.stages)
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv2d_against_torch(stage, case, rng):
    N, C, H, W, K, R, S, stride, padding, dilation, groups, bias = CONV_CASES[case]
    x, w, b, kw, _, L = conv_case(rng, case)
    if isinstance(padding, tuple):  # torch pads symmetrically; pad the input ourselves instead
        t, l, bo, r = padding
        xt = F.pad(torch.from_numpy(x), (l, r, t, bo))
        padding = 0
    else:
        xt = torch.from_numpy(x)
    bt = None if b is None else torch.from_numpy(b)
    ref = F.conv2d(xt, torch.from_numpy(w), bt, stride, padding, dilation, groups)
    y = opfuse.ops.conv2d(x, w, b, **kw, post_ops=["gelu"], stage=stage)
    atol, rtol = dot_tol(L, b is not None, c=8)  # both sides round: twice the budget
    assert_close(y, F.gelu(ref).numpy(), atol + 16 * EPS, rtol + 16 * EPS, f"conv2d/{stage}/{case} vs torch")


@needs_torch
@pytest.mark.parametrize("stage", opfuse.stages)
def test_gemm_and_friends_against_torch(stage, rng):
    a, b, bias = uniform(rng, (31, 67)), uniform(rng, (67, 45)), uniform(rng, (45,))
    ref = torch.relu(torch.matmul(torch.from_numpy(a), torch.from_numpy(b)) + torch.from_numpy(bias)).numpy()
    y = opfuse.ops.gemm(a, b, bias, post_ops=["relu"], stage=stage)
    assert_close(y, ref, *dot_tol(67, True, c=8), f"gemm/{stage} vs torch.matmul")
    x = uniform(rng, (2, 4, 10, 12))
    t = torch.from_numpy(x)
    assert_close(opfuse.ops.maxpool2d(x, 3, 2, 1, stage=stage), F.max_pool2d(t, 3, 2, 1).numpy(), 0, 0, "maxpool2d")
    avg = F.avg_pool2d(t, 3, 2, 1, count_include_pad=False).numpy()
    assert_close(opfuse.ops.avgpool2d(x, 3, 2, 1, stage=stage), avg, 16 * EPS, 16 * EPS, "avgpool2d")
    y = opfuse.ops.layernorm(x, np.ones(12, np.float32), np.zeros(12, np.float32), stage=stage)
    assert_close(y, F.layer_norm(t, (12,)).numpy(), 64 * EPS, 32 * EPS, "layernorm")
    assert_close(opfuse.ops.softmax(x, axis=1, stage=stage), torch.softmax(t, 1).numpy(), 4 * EPS, 32 * EPS, "softmax")
    q, k, v = (uniform(rng, (1, 2, 7, 8)) for _ in range(3))
    sc = torch.softmax(torch.from_numpy(q) @ torch.from_numpy(k).transpose(-1, -2) / math.sqrt(8), -1)
    ref = (sc @ torch.from_numpy(v)).numpy()
    assert_close(opfuse.ops.attention(q, k, v, stage=stage), ref, 64 * EPS, 64 * EPS, "attention")


@needs_torch
def test_whole_model_exported_by_torch(rng):
    # A small CNN exported by torch.onnx with a dynamic batch, loaded from bytes, run at every
    # stage and at two batch sizes, against PyTorch's own output.
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn1 = torch.nn.BatchNorm2d(8)
            self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
            self.bn2 = torch.nn.BatchNorm2d(8)
            self.fc = torch.nn.Linear(8 * 8 * 8, 10)

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = torch.nn.functional.max_pool2d(y, 2)
            y = torch.relu(self.bn2(self.conv2(y)) + y)
            return torch.softmax(self.fc(torch.flatten(y, 1)), -1)

    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():  # non-trivial running statistics, so the folded batch norms matter
        for bn in (net.bn1, net.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    f = io.BytesIO()
    torch.onnx.export(net, torch.zeros(1, 3, 16, 16), f, input_names=["x"], output_names=["probs"],
                      dynamic_axes={"x": {0: "batch"}, "probs": {0: "batch"}}, opset_version=13)
    for stage in opfuse.stages:
        s = opfuse.Session(f.getvalue(), stage=stage)
        assert s.inputs[0].shape == ["batch", 3, 16, 16]
        for batch in (1, 3):
            x = uniform(rng, (batch, 3, 16, 16))
            with torch.no_grad():
                ref = net(torch.from_numpy(x)).numpy()
            y = s.run({"x": x})["probs"]
            assert_close(y, ref, MODEL_ATOL, MODEL_RTOL, f"torch-exported CNN {stage} batch {batch}")


@needs_torch
def test_int64_and_bool_inputs():
    # A model with int64 and bool inputs (torch.onnx writes Cast and Where): exact-dtype arrays
    # go in by pointer, int32 indices are converted (same kind), and a float32 array for the
    # int64 input, or an int64 one for the bool input, gets the library's own dtype message.
    class Net(torch.nn.Module):
        def forward(self, x, idx, keep):
            return torch.where(keep, x * 2.0, x) + idx.float()

    f = io.BytesIO()
    example = (torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, 3, dtype=torch.bool))
    torch.onnx.export(Net(), example, f, input_names=["x", "idx", "keep"], output_names=["y"], opset_version=13)
    s = opfuse.Session(f.getvalue())
    assert [(v.name, v.dtype, v.type) for v in s.inputs] == [
        ("x", np.float32, "tensor(float)"),
        ("idx", np.int64, "tensor(int64)"),
        ("keep", np.bool_, "tensor(bool)"),
    ]
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    idx = np.arange(10, 16).reshape(2, 3)
    keep = np.array([[True, False, True], [False, True, False]])
    expect = np.where(keep, 2 * x, x) + idx
    np.testing.assert_array_equal(s.run({"x": x, "idx": idx, "keep": keep})["y"], expect)
    assert s.converted_inputs == []
    np.testing.assert_array_equal(s.run({"x": x, "idx": idx.astype(np.int32), "keep": keep})["y"], expect)
    assert s.converted_inputs == ["idx"]
    with pytest.raises(opfuse.InvalidArgumentError, match="input 'idx' is f32, the model declares i64"):
        s.run({"x": x, "idx": idx.astype(np.float32), "keep": keep})
    with pytest.raises(opfuse.InvalidArgumentError, match="input 'keep' is i64, the model declares boolean"):
        s.run({"x": x, "idx": idx, "keep": keep.astype(np.int64)})
    with pytest.raises(opfuse.InvalidArgumentError, match="input 'idx' is float64, expected int64"):
        s.run({"x": x, "idx": idx.astype(np.float64), "keep": keep})
