#!/usr/bin/python3
"""PyTorch peer for opfuse's whole-model benchmark: one model, one mode, one thread count.

    /usr/bin/python3 scripts/peers/torch_run.py MODEL.onnx --model resnet50|mobilenet_v2|bert_layer \
        --mode eager|frozen --threads N --warmup W --repeat R [--dims batch=1,seq=128]

prints one JSON object on stdout:
    {"peer": "pytorch", "version", "model", "mode", "threads", "median_ms", "min_ms", "times_ms",
     "peak_rss_bytes", "nodes"}

The network is a torch nn.Module (torchvision's ResNet-50 / MobileNetV2, a hand-written
BERT-base layer below) whose weights are read from the initializers of the same ONNX file that
opfuse and ONNX Runtime run: `opfuse export` names every parameter by its PyTorch state_dict
name, so the initializers load with load_state_dict(strict=True) and a naming or shape mismatch
is an error, not a silently random weight. The few constants the export adds (Clip bounds,
Shape/Gather indices, LayerNorm epsilon, ...) are checked against the values the module
hard-codes instead.

Modes:
  eager   the module itself, called under torch.inference_mode().
  frozen  torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(module))): weights
          become constants, Conv+BN are folded, and for CNNs the convolutions move to oneDNN
          (MKLDNN) layout.

"nodes" is counted without timing anything:
  eager   the aten ops one inference dispatches, counted by a TorchDispatchMode around one call
          under inference_mode (the same mode as the timed runs). At this level PyTorch 1.13
          dispatches the ops the module calls (conv2d, batch_norm, linear, softmax, view, ...),
          views and the eval-mode dropout included, before they decompose into backend kernels.
  frozen  the nodes of the optimized frozen graph that produce a Tensor, minus the constants
          (prim::Constant, prim::ConstantMKLDNNTensor: weights) and prim::BroadcastMKLDNNTensors
          (the shape helper inserted before an MKLDNN add). Nodes with no Tensor output
          (ListConstruct, GetAttr, size/len/gt/Int shape arithmetic, the If that raises on a bad
          rank) are bookkeeping and not counted.

Correctness was checked once per model, by hand, not by a test: the inputs of make_inputs()
(for bert_layer with the last 16 tokens masked by -10000, so the mask path counts) were written
as ONNX test data (input_<i>.pb), run through `build/opfuse run FILE.onnx --inputs DIR --outputs
DIR`, and output_0.pb was compared with this module's eager and frozen outputs and with ONNX
Runtime's (levels disabled and all) on the same values: all agreed to float32 rounding, far inside
1e-3 of the output's largest magnitude. Loading the BERT query weight untransposed, as a check that
the comparison can fail, moved the output visibly.

Errors go to stderr with a nonzero exit status.
"""

import argparse
import gc
import json
import math
import resource
import statistics
import sys
import time
import warnings


def fail(msg):
    print(f"torch_run: {msg}", file=sys.stderr)
    sys.exit(1)


try:
    import numpy as np
    import onnx
    from onnx import numpy_helper
    import torch
    from torch import nn
except ImportError as e:  # the bench script turns this into a "skipped" record
    fail(f"cannot import {e.name}: {e}")

# torch.from_numpy warns about the read-only arrays above; they are only read.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

MODELS = ("resnet50", "mobilenet_v2", "bert_layer")
DEFAULT_DIMS = {"batch": 1, "seq": 128}  # opfuse's defaults for the symbolic dims


# ---- the BERT-base layer ---------------------------------------------------------------------
# Hugging Face's BertLayer in eval mode (dropout omitted), post-LN, with the same submodule names
# so that the state_dict keys match the export: attention.self.{query,key,value},
# attention.output.{dense,LayerNorm}, intermediate.dense, output.{dense,LayerNorm}.

HIDDEN, HEADS, HEAD_SIZE, INTERMEDIATE, LN_EPS = 768, 12, 64, 3072, 1e-12


class BertSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.query = nn.Linear(HIDDEN, HIDDEN)
        self.key = nn.Linear(HIDDEN, HIDDEN)
        self.value = nn.Linear(HIDDEN, HIDDEN)
        # Plain attributes, not globals: TorchScript cannot close over module-level Python ints
        # (freeze then turns them into constants).
        self.heads = HEADS
        self.head_size = HEAD_SIZE
        self.all_head_size = HIDDEN
        self.scale = math.sqrt(HEAD_SIZE)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        # [batch, seq, 768] -> [batch, 12, seq, 64]
        return x.view(x.size(0), x.size(1), self.heads, self.head_size).permute(0, 2, 1, 3)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q = self.split_heads(self.query(h))
        k = self.split_heads(self.key(h))
        v = self.split_heads(self.value(h))
        s = torch.matmul(q, k.transpose(-1, -2)) / self.scale  # [batch, 12, seq, seq]
        s = torch.softmax(s + mask, dim=-1)  # mask is additive, [batch, 1, 1, seq]
        ctx = torch.matmul(s, v).permute(0, 2, 1, 3).contiguous()  # [batch, seq, 12, 64]
        return ctx.view(ctx.size(0), ctx.size(1), self.all_head_size)


class BertSelfOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(HIDDEN, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=LN_EPS)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class BertAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.self = BertSelfAttention()
        self.output = BertSelfOutput()

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(h, mask), h)


class BertIntermediate(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(HIDDEN, INTERMEDIATE)
        self.act = nn.GELU()  # the exact (erf) form, as the export's Div/Erf/Add/Mul/Mul

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))


class BertOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(INTERMEDIATE, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=LN_EPS)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class BertLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = BertAttention()
        self.intermediate = BertIntermediate()
        self.output = BertOutput()

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        a = self.attention(hidden_states, attention_mask)
        return self.output(self.intermediate(a), a)


# Initializers the export adds that are not parameters, with the value the module hard-codes.
EXPORT_CONSTANTS = {
    "mobilenet_v2": {"relu6.min": 0.0, "relu6.max": 6.0},
    "bert_layer": {
        "gather.index0": 0, "gather.index1": 1, "unsqueeze.axes0": [0],
        "heads": [HEADS], "head_size": [HEAD_SIZE], "all_head_size": [HIDDEN],
        "attention.scale": math.sqrt(HEAD_SIZE), "layernorm.two": 2.0, "layernorm.epsilon": LN_EPS,
        "gelu.sqrt2": math.sqrt(2.0), "gelu.one": 1.0, "gelu.half": 0.5,
    },
}


def make_module(name):
    if name == "bert_layer":
        return BertLayer()
    try:
        import torchvision
    except ImportError as e:
        fail(f"{name} needs torchvision (Debian: python3-torchvision): {e}")
    return getattr(torchvision.models, name)(weights=None)


def load_model(name, path):
    """The module for `name` in eval mode, with the weights of the ONNX file at `path`, and the
    ONNX graph's non-initializer inputs as (name, [dim or dim_param]) pairs."""
    try:
        proto = onnx.load(path)
    except Exception as e:
        fail(f"cannot read {path}: {e}")
    graph = proto.graph
    init_names = {t.name for t in graph.initializer}
    inputs = [(i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim])
              for i in graph.input if i.name not in init_names]
    constants = EXPORT_CONSTANTS.get(name, {})
    state = {}
    for t in graph.initializer:
        a = numpy_helper.to_array(t)
        if t.name in constants:
            if not np.allclose(a, constants[t.name], rtol=1e-6):
                fail(f"{path}: constant {t.name} is {a.tolist()}, the module assumes {constants[t.name]}")
            continue
        # The BERT linears are exported as MatMul(x, W) with W = weight^T stored [in, out].
        if name == "bert_layer" and t.name.endswith(".weight") and a.ndim == 2:
            a = np.ascontiguousarray(a.T)
        # to_array views the protobuf's bytes read-only; load_state_dict only copies from it.
        state[t.name] = torch.from_numpy(a)
    missing_constants = set(constants) - init_names
    if missing_constants:
        fail(f"{path}: no initializer {sorted(missing_constants)}; is this the {name} export?")
    # Free the protobuf before the module allocates its own copy of the weights: the peak RSS
    # then holds the weights about twice (as opfuse and ONNX Runtime do while loading), not three times.
    del proto, graph
    gc.collect()
    module = make_module(name)
    # BatchNorm's num_batches_tracked counter is a training-only buffer that ONNX has no use for.
    for key, value in module.state_dict().items():
        if key.endswith("num_batches_tracked") and key not in state:
            state[key] = torch.zeros_like(value)
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as e:
        fail(f"{path} does not match the {name} module: {e}")
    del state
    gc.collect()
    return module.eval(), inputs


def parse_dims(text):
    dims = dict(DEFAULT_DIMS)
    for item in filter(None, (text or "").split(",")):
        key, sep, value = item.partition("=")
        if not sep or not value.isdigit() or int(value) < 1:
            fail(f"--dims: expected NAME=N[,NAME=N...], got {item!r}")
        dims[key] = int(value)
    return dims


def make_inputs(inputs, dims):
    """Deterministic float32 inputs: N(0, 1) from a fixed seed, zeros for a mask (all visible)."""
    gen = torch.Generator().manual_seed(0)
    feeds = []
    for name, shape in inputs:
        try:
            concrete = [d if isinstance(d, int) and d > 0 else dims[d] for d in shape]
        except KeyError as e:
            fail(f"input {name} has symbolic dim {e.args[0]}; bind it with --dims {e.args[0]}=N")
        if "mask" in name:
            feeds.append(torch.zeros(concrete))
        else:
            feeds.append(torch.randn(concrete, generator=gen))
    return feeds


def count_eager_ops(module, feeds):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.count += 1
            return func(*args, **(kwargs or {}))

    counter = Counter()
    with torch.inference_mode(), counter:
        module(*feeds)
    return counter.count


# Tensor-producing nodes that are not compute: weights and the MKLDNN broadcast helper.
NOT_COMPUTE = {"prim::Constant", "prim::ConstantMKLDNNTensor", "prim::BroadcastMKLDNNTensors"}


def count_graph_nodes(graph):
    tensor = torch._C.TensorType.get()
    count = 0
    for node in graph.nodes():
        if node.kind() in NOT_COMPUTE:
            continue
        if any(o.type().isSubtypeOf(tensor) for o in node.outputs()):
            count += 1
    return count


def freeze(module):
    return torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(module)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("onnx")
    p.add_argument("--model", required=True, choices=MODELS)
    p.add_argument("--mode", required=True, choices=("eager", "frozen"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--dims", default="", help="symbolic dims, e.g. batch=1,seq=128 (the default)")
    a = p.parse_args()
    if a.threads < 1 or a.warmup < 0 or a.repeat < 1:
        fail("--threads and --repeat must be >= 1, --warmup >= 0")

    # Intra-op threads as asked; inter-op 1 like the ONNX Runtime peer (nothing here forks).
    # The BLAS behind eager matmuls and 1x1 convolutions is Debian's OpenBLAS, OpenMP variant
    # (scripts/setup.sh), which shares this OpenMP pool and so follows set_num_threads.
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)

    module, inputs = load_model(a.model, a.onnx)
    feeds = make_inputs(inputs, parse_dims(a.dims))

    if a.mode == "eager":
        nodes = count_eager_ops(module, feeds)
        run = module
    else:
        try:
            run = freeze(module)
        except Exception as e:
            fail(f"torch.jit script/freeze/optimize_for_inference failed: {e}")
        nodes = count_graph_nodes(run.graph)
        del module  # the frozen module holds its own (folded) copy of the weights
        gc.collect()

    times = []
    with torch.inference_mode():
        for i in range(a.warmup + a.repeat):
            t0 = time.perf_counter()
            run(*feeds)
            dt = (time.perf_counter() - t0) * 1e3
            if i >= a.warmup:
                times.append(dt)

    print(json.dumps({
        "peer": "pytorch",
        "version": torch.__version__,
        "model": a.model,
        "mode": a.mode,
        "threads": a.threads,
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "times_ms": times,
        # Linux reports ru_maxrss in KiB.
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "nodes": nodes,
    }))


if __name__ == "__main__":
    main()
