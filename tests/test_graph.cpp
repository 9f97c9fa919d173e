// tests/test_graph.cpp - the graph IR: building, editing, ordering, verifying and printing.
//
// Graphs are built by hand, a few nodes each, so that every verify() rule has a graph that
// breaks exactly that rule and the test can check the message names the node and value at
// fault. The long-chain test is the guard against a recursive sort or verifier creeping back
// in: 20,000 nodes deep would overflow the stack of a depth-first walk.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "graph/ir.hpp"

namespace opfuse::graph {
namespace {

// Each helper records a failure (and returns -1) when the graph refuses the call.
int value(Graph& g, const std::string& name, Dims dims = {1, 8}) {
  const Result<int> r = g.add_value(name, DType::f32, std::move(dims));
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r ? *r : -1;
}

int input(Graph& g, const std::string& name, Dims dims = {1, 8}) {
  const Result<int> r = g.add_input(name, DType::f32, std::move(dims));
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r ? *r : -1;
}

int node(Graph& g, NodeOp op, const std::string& name, std::vector<int> in, std::vector<int> out,
         std::optional<OpParams> params = std::nullopt, std::map<std::string, Attr> attrs = {}) {
  const Result<int> r = g.add_node(op, name, std::move(in), std::move(out), std::move(params), std::move(attrs));
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r ? *r : -1;
}

// verify() fails with invalid_argument and a message holding every one of `parts`.
void expect_invalid(const Status& s, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s.is_ok()) << "expected an error containing \"" << parts.front() << "\"";
  EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
  for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
}

std::vector<std::string> names_of(const Graph& g, const std::vector<int>& ids) {
  std::vector<std::string> r;
  for (int id : ids) r.push_back(g.node(id).name);
  return r;
}

// ---- dims and op names ---------------------------------------------------------------------

TEST(GraphDims, StaticDimsBecomeAShape) {
  const Dims d{1, 3, 224, 224};
  EXPECT_TRUE(all_static(d));
  EXPECT_EQ(to_string(d), "1x3x224x224");
  const Result<Shape> s = to_shape(d);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(*s, (Shape{1, 3, 224, 224}));
  EXPECT_EQ(dims_of(*s), d);
  EXPECT_EQ(to_string(Dims{}), "scalar");
}

TEST(GraphDims, SymbolicDimIsNamedWhenAShapeIsAskedFor) {
  const Dims d{Dim::sym("batch"), 128, 768};
  EXPECT_FALSE(all_static(d));
  EXPECT_EQ(to_string(d), "batchx128x768");
  EXPECT_EQ(to_string(Dims{Dim(), 10}), "?x10");
  expect_invalid(to_shape(d, "value \"ids\"").status(), {"graph: value \"ids\" dim 0", "\"batch\""});
  expect_invalid(to_shape(Dims{1, 1, 1, 1, 1, 1}).status(), {"rank 6"});
}

TEST(GraphOps, NameRoundTripForEveryNodeOp) {
  std::set<std::string_view> seen;
  for (int i = 0; i < kNodeOpCount; ++i) {
    const auto op = static_cast<NodeOp>(i);
    const std::string_view n = name(op);
    EXPECT_FALSE(n.empty() || n == "unknown") << i;
    EXPECT_TRUE(seen.insert(n).second) << "duplicate name " << n;
    EXPECT_EQ(node_op_from_name(n), op) << n;
    // The registry ops come first, in OpKind order and with op_name()'s spelling.
    if (i < kOpCount) {
      EXPECT_EQ(registry_op(op), static_cast<OpKind>(i)) << n;
      EXPECT_EQ(n, op_name(static_cast<OpKind>(i)));
      EXPECT_EQ(node_op(static_cast<OpKind>(i)), op);
    } else {
      EXPECT_FALSE(registry_op(op).has_value()) << n;
    }
  }
  EXPECT_FALSE(node_op_from_name("Conv").has_value());
  EXPECT_EQ(name(DType::boolean), "bool");
}

// ---- building ------------------------------------------------------------------------------

TEST(GraphBuild, BadReferencesComeBackAsStatuses) {
  Graph g;
  const int x = input(g, "x", {1, 3, 8, 8});
  const int y = value(g, "y");
  const Result<int> bad_input = g.add_node(NodeOp::conv2d, "conv1", {x, x, 99}, {y});
  ASSERT_FALSE(bad_input.is_ok());
  EXPECT_EQ(bad_input.status().message(), "graph: node \"conv1\" input 2 refers to value id 99 (graph has 2 values)");
  expect_invalid(g.add_node(NodeOp::relu, "r", {x}, {}).status(), {"\"r\"", "no outputs"});
  expect_invalid(g.add_node(NodeOp::relu, "r", {x}, {-1}).status(), {"\"r\" output 0", "value id -1"});
  expect_invalid(g.add_node(NodeOp::relu, "", {x}, {y}).status(), {"needs a name"});
  expect_invalid(g.add_node(NodeOp::relu, "r", {x}, {y}, Conv2dParams{}).status(),
                 {"\"r\" (relu)", "Conv2dParams", "UnaryParams"});
  expect_invalid(g.add_node(NodeOp::reshape, "r", {x}, {y}, UnaryParams{}).status(), {"takes attributes"});
  expect_invalid(g.add_value("x").status(), {"value name \"x\" is taken"});
  expect_invalid(g.add_initializer("w", {2, 3}, std::vector<float>(5)).status(), {"\"w\"", "5 elements", "need 6"});
  expect_invalid(g.add_initializer("m", {2}, std::vector<std::int64_t>{0, 2}, DType::boolean).status(), {"bool"});
  EXPECT_EQ(g.nodes().size(), 0u) << "a refused node must not be added";

  // A registry op without params gets its defaults, so it always converts to an OpDesc.
  const int r = node(g, NodeOp::clip, "clip", {x}, {y});
  ASSERT_TRUE(g.node(r).params.has_value());
  EXPECT_EQ(std::get<UnaryParams>(*g.node(r).params).act.beta, 6.f);
  EXPECT_EQ(g.value(y).producer, r);
  EXPECT_EQ(g.find_value("y"), y);
  EXPECT_EQ(g.find_node("clip"), r);
}

TEST(GraphBuild, RegistryNodeConvertsToAValidOpDesc) {
  Graph g;
  const int x = input(g, "x", {1, 3, 16, 16});
  const int w = *g.add_initializer("w", {8, 3, 3, 3}, std::vector<float>(8 * 3 * 3 * 3, 0.5f));
  const int b = *g.add_initializer("b", {8}, std::vector<float>(8, 0.f));
  const int y = value(g, "y", {1, 8, 16, 16});
  Conv2dParams p;
  p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 1;
  p.has_bias = true;
  p.post_ops.push_back(PostOp::activation(Activation::relu()));
  const int c = node(g, NodeOp::conv2d, "conv", {x, w, b}, {y}, p);
  const Result<OpDesc> d = op_desc(g, c);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->op, OpKind::conv2d);
  ASSERT_EQ(d->inputs.size(), 3u);
  EXPECT_EQ(d->inputs[1].shape, (Shape{8, 3, 3, 3}));
  EXPECT_TRUE(validate(*d).is_ok()) << validate(*d).to_string();

  // A symbolic batch must be bound before the node can run.
  Graph s;
  const int xs = input(s, "x", {Dim::sym("batch"), 8});
  const int ys = value(s, "y", {Dim::sym("batch"), 8});
  const int r = node(s, NodeOp::relu, "relu", {xs}, {ys});
  expect_invalid(op_desc(s, r).status(), {"\"relu\" input 0", "\"batch\""});
  const int t = node(s, NodeOp::transpose, "t", {ys}, {value(s, "z")});
  expect_invalid(op_desc(s, t).status(), {"not a registry op"});
}

// ---- order ---------------------------------------------------------------------------------

TEST(GraphOrder, DiamondPutsProducersFirst) {
  // x -> a -> {b, c} -> d, with the nodes added in reverse so the sort has work to do.
  Graph g;
  const int x = input(g, "x");
  const int ta = value(g, "ta"), tb = value(g, "tb"), tc = value(g, "tc"), td = value(g, "td");
  node(g, NodeOp::add, "d", {tb, tc}, {td});
  node(g, NodeOp::sigmoid, "b", {ta}, {tb});
  node(g, NodeOp::tanh, "c", {ta}, {tc});
  node(g, NodeOp::relu, "a", {x}, {ta});
  ASSERT_TRUE(g.set_outputs({td}).is_ok());
  EXPECT_TRUE(verify(g).is_ok()) << verify(g).to_string();
  const auto order = topological_order(g);
  ASSERT_TRUE(order.is_ok()) << order.status().to_string();
  // b and c are both ready after a; the tie goes to the one added first.
  EXPECT_EQ(names_of(g, *order), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(g.consumers(ta), (std::vector<int>{1, 2}));
}

TEST(GraphOrder, StableForAGraphBuiltInOrder) {
  // Six independent branches and a join, interleaved: a graph added in dataflow order must come
  // back exactly in insertion order.
  Graph g;
  const int x = input(g, "x");
  std::vector<int> outs;
  for (int i = 0; i < 6; ++i) {
    const int t = value(g, fmt::format("t{}", i));
    node(g, i % 2 ? NodeOp::sigmoid : NodeOp::relu, fmt::format("n{}", i), {i < 2 ? x : outs[i - 2]}, {t});
    outs.push_back(t);
  }
  const int y = value(g, "y");
  node(g, NodeOp::add, "join", {outs[4], outs[5]}, {y});
  ASSERT_TRUE(g.set_outputs({y}).is_ok());
  const auto order = topological_order(g);
  ASSERT_TRUE(order.is_ok()) << order.status().to_string();
  EXPECT_EQ(*order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
}

TEST(GraphOrder, CycleIsReportedWithItsNodes) {
  // a -> b -> c -> a, and d hangs off the cycle without being on it.
  Graph g;
  const int x = input(g, "x");
  const int t1 = value(g, "t1"), t2 = value(g, "t2"), t3 = value(g, "t3"), t4 = value(g, "t4");
  node(g, NodeOp::add, "a", {x, t3}, {t1});
  node(g, NodeOp::relu, "b", {t1}, {t2});
  node(g, NodeOp::relu, "c", {t2}, {t3});
  node(g, NodeOp::relu, "d", {t3}, {t4});
  ASSERT_TRUE(g.set_outputs({t4}).is_ok());
  const auto order = topological_order(g);
  expect_invalid(order.status(), {"cycle", "\"b\" -> \"c\" -> \"a\" -> \"b\"", "4 of 4 live nodes"});
  EXPECT_EQ(order.status().message().find("\"d\""), std::string::npos) << order.status().message();
  expect_invalid(verify(g), {"cycle"});
  // A node reading its own output is the smallest cycle.
  Graph s;
  const int u = value(s, "u");
  node(s, NodeOp::relu, "self", {u}, {u});
  expect_invalid(topological_order(s).status(), {"\"self\" -> \"self\""});
}

TEST(GraphOrder, TwentyThousandNodeChainNeedsNoRecursion) {
  constexpr int kNodes = 20000;
  Graph g;
  int prev = input(g, "x");
  for (int i = 0; i < kNodes; ++i) {
    const int t = value(g, fmt::format("t{}", i));
    node(g, NodeOp::relu, fmt::format("relu{}", i), {prev}, {t});
    prev = t;
  }
  ASSERT_TRUE(g.set_outputs({prev}).is_ok());
  EXPECT_TRUE(verify(g).is_ok()) << verify(g).to_string();
  const auto order = topological_order(g);
  ASSERT_TRUE(order.is_ok()) << order.status().to_string();
  ASSERT_EQ(order->size(), static_cast<std::size_t>(kNodes));
  for (int i = 0; i < kNodes; ++i) ASSERT_EQ((*order)[static_cast<std::size_t>(i)], i);
  // Closing the chain into one long cycle must be found iteratively too.
  ASSERT_TRUE(g.set_input(0, 0, prev).is_ok());
  expect_invalid(topological_order(g).status(), {"cycle", "(20000 nodes)"});
}

// ---- verify --------------------------------------------------------------------------------

TEST(GraphVerify, DanglingInputIsNamed) {
  Graph g;
  const int x = input(g, "x");
  const int ghost = value(g, "ghost");
  const int y = value(g, "y");
  node(g, NodeOp::add, "sum", {x, ghost}, {y});
  ASSERT_TRUE(g.set_outputs({y}).is_ok());
  expect_invalid(verify(g), {"node \"sum\" input 1", "\"ghost\"", "no live node produces"});
}

TEST(GraphVerify, ValueProducedTwiceIsNamed) {
  Graph g;
  const int x = input(g, "x");
  const int y = value(g, "y");
  node(g, NodeOp::relu, "first", {x}, {y});
  node(g, NodeOp::sigmoid, "second", {x}, {y});
  ASSERT_TRUE(g.set_outputs({y}).is_ok());
  expect_invalid(verify(g), {"\"y\"", "produced twice", "\"first\"", "\"second\""});
}

TEST(GraphVerify, GraphInputOrConstantIsNeverProduced) {
  Graph g;
  const int x = input(g, "x");
  const int w = *g.add_initializer("w", {1, 8}, std::vector<float>(8, 1.f));
  node(g, NodeOp::relu, "r", {w}, {x});
  ASSERT_TRUE(g.set_outputs({x}).is_ok());
  expect_invalid(verify(g), {"node \"r\" output 0", "\"x\"", "graph input"});
  Graph c;
  const int x2 = input(c, "x");
  const int w2 = *c.add_initializer("w", {1, 8}, std::vector<float>(8, 1.f));
  node(c, NodeOp::relu, "r", {x2}, {w2});
  ASSERT_TRUE(c.set_outputs({w2}).is_ok());
  expect_invalid(verify(c), {"\"w\"", "graph constant"});
}

TEST(GraphVerify, DuplicateNodeNamesAreNamed) {
  Graph g;
  const int x = input(g, "x");
  const int t = value(g, "t"), y = value(g, "y");
  node(g, NodeOp::relu, "act", {x}, {t});
  node(g, NodeOp::relu, "act", {t}, {y});
  ASSERT_TRUE(g.set_outputs({y}).is_ok());
  expect_invalid(verify(g), {"node name \"act\" is used by node ids 0 and 1"});
}

TEST(GraphVerify, OutputNeverProducedIsNamed) {
  Graph g;
  const int x = input(g, "x");
  const int t = value(g, "t"), never = value(g, "never");
  node(g, NodeOp::relu, "r", {x}, {t});
  ASSERT_TRUE(g.set_outputs({t, never}).is_ok());
  expect_invalid(verify(g), {"graph output 1", "\"never\""});
  ASSERT_TRUE(g.set_outputs({}).is_ok());
  expect_invalid(verify(g), {"no outputs"});
  expect_invalid(g.set_outputs({7}), {"graph output 0 refers to value id 7"});
}

TEST(GraphVerify, EditsBehindTheGraphsBackAreCaught) {
  Graph g;
  const int x = input(g, "x");
  const int y = value(g, "y");
  const int r = node(g, NodeOp::relu, "r", {x}, {y});
  ASSERT_TRUE(g.set_outputs({y}).is_ok());
  ASSERT_TRUE(verify(g).is_ok());
  g.node(r).inputs[0] = 42;
  expect_invalid(verify(g), {"node \"r\" input 0 refers to value id 42"});
  g.node(r).inputs[0] = x;
  g.node(r).params = BinaryParams{};
  expect_invalid(verify(g), {"\"r\" (relu) has BinaryParams"});
  g.node(r).params = UnaryParams{Activation::relu()};
  g.value(y).producer = -1;
  expect_invalid(verify(g), {"\"y\"", "names producer node id -1"});
}

TEST(GraphVerify, RemoveNodeAndReplaceAllUsesStayVerified) {
  // x -> id (identity) -> t -> conv -> c -> relu -> y: drop the identity, then fuse the relu into
  // the conv's post-op chain, the way a pass would.
  Graph g;
  const int x = input(g, "x", {1, 4, 8, 8});
  const int w = *g.add_initializer("w", {4, 4, 1, 1}, std::vector<float>(16, 1.f));
  const int t = value(g, "t", {1, 4, 8, 8}), c = value(g, "c", {1, 4, 8, 8}), y = value(g, "y", {1, 4, 8, 8});
  const int id = node(g, NodeOp::identity, "id", {x}, {t});
  const int conv = node(g, NodeOp::conv2d, "conv", {t, w}, {c});
  const int relu = node(g, NodeOp::relu, "relu", {c}, {y});
  ASSERT_TRUE(g.set_outputs({y}).is_ok());
  ASSERT_TRUE(verify(g).is_ok()) << verify(g).to_string();

  ASSERT_TRUE(g.remove_node(id).is_ok());
  expect_invalid(verify(g), {"node \"conv\" input 0", "\"t\""});  // its input now dangles
  const Result<int> n = g.replace_all_uses(t, x);
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(*n, 1);
  EXPECT_TRUE(verify(g).is_ok()) << verify(g).to_string();
  EXPECT_TRUE(g.consumers(t).empty());
  EXPECT_EQ(g.consumers(x), std::vector<int>{conv});

  // The fused node takes over y; it is added before the two it replaces are removed.
  Conv2dParams p;
  p.post_ops.push_back(PostOp::activation(Activation::relu()));
  const int fused = node(g, NodeOp::conv2d, "conv+relu", {x, w}, {y}, p);
  expect_invalid(verify(g), {"produced twice"});
  ASSERT_TRUE(g.remove_node(relu).is_ok());
  ASSERT_TRUE(g.remove_node(conv).is_ok());
  EXPECT_EQ(g.value(y).producer, fused) << "removing the old producer must not clear the new one";
  EXPECT_TRUE(verify(g).is_ok()) << verify(g).to_string();
  EXPECT_EQ(g.live_node_count(), 1);
  const auto order = topological_order(g);
  ASSERT_TRUE(order.is_ok());
  EXPECT_EQ(*order, std::vector<int>{fused});
  expect_invalid(g.remove_node(relu), {"not a live node"});
  expect_invalid(g.replace_all_uses(t, 1000).status(), {"value id 1000"});
}

// ---- printing ------------------------------------------------------------------------------

TEST(GraphPrint, OneLinePerLiveNodeWithOpsAndDims) {
  Graph g("stem");
  const int x = input(g, "x", {1, 3, 224, 224});
  const int w = *g.add_initializer("w", {64, 3, 7, 7}, std::vector<float>(64 * 3 * 7 * 7, 0.f));
  const int b = *g.add_initializer("b", {64}, std::vector<float>(64, 0.f));
  const int shape = *g.add_initializer("shape", {2}, std::vector<std::int64_t>{1, -1});
  const int y = value(g, "y", {1, 64, 112, 112}), p = value(g, "p", {1, 64, 56, 56});
  const int f = value(g, "f", {1, 200704}), r = value(g, "r", {1, 200704}), u = value(g, "u");
  Conv2dParams cp;
  cp.stride_h = cp.stride_w = 2;
  cp.pad_top = cp.pad_left = cp.pad_bottom = cp.pad_right = 3;
  cp.has_bias = true;
  cp.post_ops = {PostOp::activation(Activation::relu())};
  node(g, NodeOp::conv2d, "conv1", {x, w, b}, {y}, cp);
  Pool2dParams pp;
  pp.kernel_h = pp.kernel_w = 3;
  pp.pad_top = pp.pad_left = pp.pad_bottom = pp.pad_right = 1;
  node(g, NodeOp::maxpool2d, "pool1", {y}, {p}, pp);
  node(g, NodeOp::flatten, "flat", {p}, {f}, std::nullopt, {{"axis", std::int64_t{1}}});
  node(g, NodeOp::reshape, "reshape", {f, shape}, {r});
  const int gone = node(g, NodeOp::relu, "gone", {r}, {u});
  ASSERT_TRUE(g.remove_node(gone).is_ok());
  ASSERT_TRUE(g.set_outputs({r}).is_ok());
  ASSERT_TRUE(verify(g).is_ok()) << verify(g).to_string();

  const std::string dump = to_string(g);
  std::vector<std::string> lines;
  std::istringstream in(dump);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u) << dump;  // four live nodes and the footer
  const auto has = [&](std::size_t i, const std::string& s) {
    EXPECT_NE(lines[i].find(s), std::string::npos) << "line " << i << " lacks \"" << s << "\":\n" << dump;
  };
  has(0, "conv1    conv2d k7x7 s2 p3 g1 +bias+relu  x[1x3x224x224] w[64x3x7x7] b[64] -> y[1x64x112x112]");
  has(1, "pool1    maxpool2d k3x3 s2 p1  y[1x64x112x112] -> p[1x64x56x56]");
  has(2, "flatten axis=1  p[1x64x56x56] -> f[1x200704]");
  has(3, "reshape  reshape  f[1x200704] shape[2 i64] -> r[1x200704]");
  has(4, "# 4 nodes, 8 values, 3 initializers (");
  has(4, std::to_string((64 * 3 * 7 * 7 + 64) * 4 + 2 * 8) + " bytes); inputs: x; outputs: r");
  EXPECT_EQ(dump.find("gone"), std::string::npos) << dump;

  // Symbolic dims, dtypes and layouts show in the value labels.
  Graph s;
  const int ids = *s.add_input("ids", DType::i64, {Dim::sym("batch"), 128});
  const int e = value(s, "e", {Dim::sym("batch"), 128, 768});
  s.value(e).layout = Layout::nhwc;
  node(s, NodeOp::gather, "embed", {ids}, {e}, std::nullopt, {{"axis", std::int64_t{0}}});
  EXPECT_NE(to_string(s).find("ids[batchx128 i64] -> e[batchx128x768 nhwc]"), std::string::npos) << to_string(s);
}

}  // namespace
}  // namespace opfuse::graph
