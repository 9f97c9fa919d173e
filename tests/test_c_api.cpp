// tests/test_c_api.cpp - the C API (include/opfuse/opfuse.h): the same bits as the C++ API on the
// built-in models, symbolic dims bound at run time, and every error path with its message (NULL
// handles and out-pointers, bad files, wrong shapes, sizes and dtypes, struct sizes).
// tests/c_api_compile.c checks that the header is C99 and links from C.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "alloc_counter.hpp"
#include "opfuse/model.hpp"
#include "opfuse/opfuse.h"

namespace {

// ---- helpers --------------------------------------------------------------------------------

struct Model {
  opfuse_model* p = nullptr;
  Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model() { opfuse_model_destroy(p); }
};
struct Session {
  opfuse_session* p = nullptr;
  Session() = default;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() { opfuse_session_destroy(p); }
};

std::string last_error() { return opfuse_last_error(); }

// Single-threaded, so that two plans of the same options compute the same bits.
opfuse_session_options options(int stage = OPFUSE_STAGE_FUSED, int fusion = OPFUSE_FUSION_FULL) {
  opfuse_session_options o;
  EXPECT_EQ(opfuse_session_options_init(&o, sizeof o), OPFUSE_OK) << last_error();
  o.stage = stage;
  o.fusion = fusion;
  o.threads = 1;
  return o;
}

opfuse::CompileOptions cpp_options(const opfuse_session_options& o) {
  opfuse::CompileOptions co;
  co.stage = static_cast<opfuse::Stage>(o.stage);
  co.fusion = static_cast<opfuse::FusionLevel>(o.fusion);
  co.threads = o.threads;
  return co;
}

std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::size_t numel(const std::vector<std::int64_t>& dims) {
  std::size_t n = 1;
  for (std::int64_t d : dims) n *= static_cast<std::size_t>(d);
  return n;
}

opfuse_tensor tensor(const char* name, const std::vector<std::int64_t>& dims, const std::vector<float>& data) {
  return {sizeof(opfuse_tensor),      name, OPFUSE_DTYPE_F32, dims.size(), dims.data(), const_cast<float*>(data.data()),
          data.size() * sizeof(float)};
}

std::vector<std::int64_t> input_dims(const opfuse_session* s, std::size_t i) {
  std::size_t rank = 0;
  EXPECT_EQ(opfuse_session_input_dims(s, i, nullptr, 0, &rank), OPFUSE_OK) << last_error();
  std::vector<std::int64_t> d(rank);
  EXPECT_EQ(opfuse_session_input_dims(s, i, d.data(), d.size(), &rank), OPFUSE_OK) << last_error();
  return d;
}

std::vector<std::int64_t> output_dims(const opfuse_session* s, std::size_t i) {
  std::size_t rank = 0;
  EXPECT_EQ(opfuse_session_output_dims(s, i, nullptr, 0, &rank), OPFUSE_OK) << last_error();
  std::vector<std::int64_t> d(rank);
  EXPECT_EQ(opfuse_session_output_dims(s, i, d.data(), d.size(), &rank), OPFUSE_OK) << last_error();
  return d;
}

// The C++ API on the same model bytes, options and inputs: the reference the C API must match bit
// for bit (it adds checks, never arithmetic).
std::vector<float> cpp_run(const std::string& builtin, const opfuse_session_options& o,
                           const std::vector<opfuse::TensorRef>& in) {
  auto m = opfuse::Model::load_builtin(builtin);
  EXPECT_TRUE(m) << m.status().to_string();
  if (!m) return {};
  auto plan = opfuse::Plan::compile(*m, cpp_options(o));
  EXPECT_TRUE(plan) << plan.status().to_string();
  if (!plan) return {};
  auto out = plan->run(in);
  EXPECT_TRUE(out) << out.status().to_string();
  if (!out) return {};
  return (*out)[0].f32;
}

void expect_same_bits(const std::vector<float>& c, const std::vector<float>& cpp, const std::string& what) {
  ASSERT_EQ(c.size(), cpp.size()) << what;
  std::size_t nonzero = 0, first_diff = c.size();
  for (std::size_t i = 0; i < c.size(); ++i) {
    nonzero += c[i] != 0.f;
    if (first_diff == c.size() && std::memcmp(&c[i], &cpp[i], sizeof(float)) != 0) first_diff = i;
  }
  EXPECT_GT(nonzero, c.size() / 2) << what << ": the outputs are mostly zero";
  EXPECT_EQ(first_diff, c.size()) << what << ": first differing element " << first_diff << ": C "
                                  << c[first_diff < c.size() ? first_diff : 0] << ", C++ "
                                  << cpp[first_diff < c.size() ? first_diff : 0];
}

// ---- versions, names ------------------------------------------------------------------------

TEST(CApi, VersionMatchesHeaderAndCMake) {
  EXPECT_STREQ(opfuse_version(), OPFUSE_VERSION_STRING);
  EXPECT_EQ(std::to_string(OPFUSE_VERSION_MAJOR) + "." + std::to_string(OPFUSE_VERSION_MINOR) + "." +
                std::to_string(OPFUSE_VERSION_PATCH),
            OPFUSE_VERSION_STRING);
#ifdef OPFUSE_CMAKE_VERSION
  // The CMake project version, which `opfuse --version` prints too (cmake/capi.cmake passes it).
  EXPECT_STREQ(OPFUSE_VERSION_STRING, OPFUSE_CMAKE_VERSION) << "bump the OPFUSE_VERSION_* macros in opfuse.h";
#else
  ADD_FAILURE() << "OPFUSE_CMAKE_VERSION is not defined: cmake/capi.cmake passes it to this file";
#endif
}

TEST(CApi, StatusAndDtypeNames) {
  EXPECT_STREQ(opfuse_status_name(OPFUSE_OK), "ok");
  EXPECT_STREQ(opfuse_status_name(OPFUSE_INVALID_ARGUMENT), "invalid_argument");
  EXPECT_STREQ(opfuse_status_name(OPFUSE_UNSUPPORTED), "unsupported");
  EXPECT_STREQ(opfuse_status_name(OPFUSE_OUT_OF_MEMORY), "out_of_memory");
  EXPECT_STREQ(opfuse_status_name(OPFUSE_INTERNAL), "internal");
  EXPECT_STREQ(opfuse_status_name(static_cast<opfuse_status>(99)), "unknown");
  EXPECT_EQ(opfuse_dtype_size(OPFUSE_DTYPE_F32), 4u);
  EXPECT_EQ(opfuse_dtype_size(OPFUSE_DTYPE_I64), 8u);
  EXPECT_EQ(opfuse_dtype_size(OPFUSE_DTYPE_BOOL), 1u);
  EXPECT_EQ(opfuse_dtype_size(static_cast<opfuse_dtype>(-1)), 0u);
  EXPECT_STREQ(opfuse_dtype_name(OPFUSE_DTYPE_BOOL), "bool");
  EXPECT_STREQ(opfuse_dtype_name(static_cast<opfuse_dtype>(3)), "unknown");
}

TEST(CApi, BuiltinModelNames) {
  const auto names = opfuse::Model::builtin_names();
  ASSERT_EQ(opfuse_builtin_model_count(), names.size());
  for (std::size_t i = 0; i < names.size(); ++i) EXPECT_EQ(names[i], opfuse_builtin_model_name(i));
  EXPECT_EQ(opfuse_builtin_model_name(names.size()), nullptr);
  const std::string want = "index " + std::to_string(names.size()) + " is out of range";
  EXPECT_NE(last_error().find(want), std::string::npos) << last_error();
}

// ---- the same bits as the C++ API -----------------------------------------------------------

TEST(CApi, MobilenetV2MatchesCppApiBitForBit) {
  Model m;
  ASSERT_EQ(opfuse_model_load_builtin("mobilenet_v2", &m.p), OPFUSE_OK) << last_error();
  const opfuse_session_options o = options();
  Session s;
  ASSERT_EQ(opfuse_session_create(m.p, &o, &s.p), OPFUSE_OK) << last_error();
  ASSERT_EQ(opfuse_session_input_count(s.p), 1u);
  ASSERT_EQ(opfuse_session_output_count(s.p), 1u);
  EXPECT_STREQ(opfuse_session_input_name(s.p, 0), "input");
  EXPECT_STREQ(opfuse_session_output_name(s.p, 0), "output");
  opfuse_dtype dt = OPFUSE_DTYPE_BOOL;
  ASSERT_EQ(opfuse_session_input_dtype(s.p, 0, &dt), OPFUSE_OK);
  EXPECT_EQ(dt, OPFUSE_DTYPE_F32);
  dt = OPFUSE_DTYPE_BOOL;
  ASSERT_EQ(opfuse_session_output_dtype(s.p, 0, &dt), OPFUSE_OK);
  EXPECT_EQ(dt, OPFUSE_DTYPE_F32);
  const std::vector<std::int64_t> xd = input_dims(s.p, 0), yd = output_dims(s.p, 0);
  EXPECT_EQ(xd, (std::vector<std::int64_t>{1, 3, 224, 224}));
  EXPECT_EQ(yd, (std::vector<std::int64_t>{1, 1000}));
  EXPECT_STREQ(opfuse_session_input_dim_symbol(s.p, 0, 2), "");

  const std::vector<float> x = random_floats(numel(xd), 11);
  std::vector<float> y(numel(yd), -7.f);
  const opfuse_tensor in = tensor("input", xd, x);
  opfuse_tensor out = tensor("output", yd, y);
  ASSERT_EQ(opfuse_session_run(s.p, &in, 1, &out, 1), OPFUSE_OK) << last_error();
  // Bound by position (NULL names) the same run gives the same bits.
  std::vector<float> y2(y.size());
  const opfuse_tensor in2 = tensor(nullptr, xd, x);
  opfuse_tensor out2 = tensor("", yd, y2);
  ASSERT_EQ(opfuse_session_run(s.p, &in2, 1, &out2, 1), OPFUSE_OK) << last_error();
  expect_same_bits(y2, y, "mobilenet_v2 by position");

  const std::vector<opfuse::TensorRef> ref{{"input", opfuse::ElementType::f32, xd, x.data()}};
  expect_same_bits(y, cpp_run("mobilenet_v2", o, ref), "mobilenet_v2 fused");
}

// The options reach the plan: naive without fusion is the C++ plan of the same options, bit for
// bit, and not the bits of the fused plan.
TEST(CApi, OptionsReachThePlan) {
  Model m;
  ASSERT_EQ(opfuse_model_load_builtin("bert_layer", &m.p), OPFUSE_OK) << last_error();
  const std::vector<std::int64_t> hd{1, 8, 768}, md{1, 1, 1, 8};
  const std::vector<float> h = random_floats(numel(hd), 3), mask(numel(md), 0.f);
  const opfuse_tensor in[] = {tensor("hidden_states", hd, h), tensor("attention_mask", md, mask)};
  const std::vector<opfuse::TensorRef> ref{{"hidden_states", opfuse::ElementType::f32, hd, h.data()},
                                           {"attention_mask", opfuse::ElementType::f32, md, mask.data()}};
  std::vector<float> naive(numel(hd)), fused(numel(hd));
  for (int stage : {OPFUSE_STAGE_NAIVE, OPFUSE_STAGE_FUSED}) {
    const opfuse_session_options o =
        options(stage, stage == OPFUSE_STAGE_NAIVE ? OPFUSE_FUSION_NONE : OPFUSE_FUSION_FULL);
    Session s;
    ASSERT_EQ(opfuse_session_create(m.p, &o, &s.p), OPFUSE_OK) << last_error();
    std::vector<float>& y = stage == OPFUSE_STAGE_NAIVE ? naive : fused;
    opfuse_tensor out = tensor("output", hd, y);
    ASSERT_EQ(opfuse_session_run(s.p, in, 2, &out, 1), OPFUSE_OK) << last_error();
    expect_same_bits(y, cpp_run("bert_layer", o, ref), stage == OPFUSE_STAGE_NAIVE ? "naive" : "fused");
  }
  EXPECT_NE(std::memcmp(naive.data(), fused.data(), naive.size() * sizeof(float)), 0)
      << "naive/none and fused/full gave the same bits: were the options ignored?";
}

// bert_layer declares [batch, seq, 768] and [batch, 1, 1, seq]: the C API reports the symbols,
// resolves the output dims for each length, and runs both lengths on one session.
TEST(CApi, BertLayerSymbolicSeqAtTwoLengths) {
  Model m;
  ASSERT_EQ(opfuse_model_load_builtin("bert_layer", &m.p), OPFUSE_OK) << last_error();
  const opfuse_session_options o = options();
  Session s;
  ASSERT_EQ(opfuse_session_create(m.p, &o, &s.p), OPFUSE_OK) << last_error();
  ASSERT_EQ(opfuse_session_input_count(s.p), 2u);
  EXPECT_STREQ(opfuse_session_input_name(s.p, 0), "hidden_states");
  EXPECT_STREQ(opfuse_session_input_name(s.p, 1), "attention_mask");
  EXPECT_EQ(input_dims(s.p, 0), (std::vector<std::int64_t>{-1, -1, 768}));
  EXPECT_EQ(input_dims(s.p, 1), (std::vector<std::int64_t>{-1, 1, 1, -1}));
  EXPECT_STREQ(opfuse_session_input_dim_symbol(s.p, 0, 0), "batch");
  EXPECT_STREQ(opfuse_session_input_dim_symbol(s.p, 0, 1), "seq");
  EXPECT_STREQ(opfuse_session_input_dim_symbol(s.p, 0, 2), "");
  EXPECT_STREQ(opfuse_session_input_dim_symbol(s.p, 1, 3), "seq");
  EXPECT_EQ(output_dims(s.p, 0), (std::vector<std::int64_t>{-1, -1, 768}));
  EXPECT_STREQ(opfuse_session_output_dim_symbol(s.p, 0, 1), "seq");

  for (std::int64_t seq : {16, 37}) {
    const std::vector<std::int64_t> hd{1, seq, 768}, md{1, 1, 1, seq};
    const std::vector<float> h = random_floats(numel(hd), static_cast<std::uint64_t>(seq));
    std::vector<float> mask(numel(md), 0.f);
    mask.back() = -10000.f;  // the last token masked out, as a padded batch would
    // Given in the other order, bound by name; data not needed to resolve dims.
    opfuse_tensor in[] = {tensor("attention_mask", md, mask), tensor("hidden_states", hd, h)};
    opfuse_tensor shapes_only[] = {in[0], in[1]};
    for (opfuse_tensor& t : shapes_only) t.data = nullptr, t.byte_size = 0;
    std::size_t rank = 0;
    std::int64_t yd[4] = {0, 0, 0, 0};
    ASSERT_EQ(opfuse_session_resolve_output_dims(s.p, shapes_only, 2, 0, yd, 4, &rank), OPFUSE_OK) << last_error();
    ASSERT_EQ(rank, 3u);
    EXPECT_EQ(std::vector<std::int64_t>(yd, yd + 3), hd) << "seq " << seq;
    std::vector<float> y(numel(hd), -7.f);
    opfuse_tensor out = tensor("output", hd, y);
    ASSERT_EQ(opfuse_session_run(s.p, in, 2, &out, 1), OPFUSE_OK) << last_error();
    const std::vector<opfuse::TensorRef> ref{{"hidden_states", opfuse::ElementType::f32, hd, h.data()},
                                             {"attention_mask", opfuse::ElementType::f32, md, mask.data()}};
    expect_same_bits(y, cpp_run("bert_layer", o, ref), "bert_layer seq " + std::to_string(seq));
  }
}

// The file and memory loaders give the model the built-in loader gives.
TEST(CApi, LoadFileAndMemoryMatchBuiltin) {
  auto bytes = opfuse::Model::builtin_bytes("bert_layer");
  ASSERT_TRUE(bytes) << bytes.status().to_string();
  const std::string path =
      (std::filesystem::temp_directory_path() / ("opfuse_capi_" + std::to_string(::getpid()) + ".onnx")).string();
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes->data(), 1, bytes->size(), f), bytes->size());
    std::fclose(f);
  }
  Model from_file, from_memory, builtin;
  ASSERT_EQ(opfuse_model_load_file(path.c_str(), &from_file.p), OPFUSE_OK) << last_error();
  std::filesystem::remove(path);
  ASSERT_EQ(opfuse_model_load_memory(bytes->data(), bytes->size(), &from_memory.p), OPFUSE_OK) << last_error();
  ASSERT_EQ(opfuse_model_load_builtin("bert_layer", &builtin.p), OPFUSE_OK) << last_error();
  const std::vector<std::int64_t> hd{1, 4, 768}, md{1, 1, 1, 4};
  const std::vector<float> h = random_floats(numel(hd), 5), mask(numel(md), 0.f);
  const opfuse_tensor in[] = {tensor(nullptr, hd, h), tensor(nullptr, md, mask)};
  std::vector<std::vector<float>> ys;
  const opfuse_session_options o = options();
  for (const opfuse_model* m : {from_file.p, from_memory.p, builtin.p}) {
    Session s;
    ASSERT_EQ(opfuse_session_create(m, &o, &s.p), OPFUSE_OK) << last_error();
    std::vector<float> y(numel(hd));
    opfuse_tensor out = tensor(nullptr, hd, y);
    ASSERT_EQ(opfuse_session_run(s.p, in, 2, &out, 1), OPFUSE_OK) << last_error();
    ys.push_back(std::move(y));
  }
  expect_same_bits(ys[0], ys[2], "load_file vs load_builtin");
  expect_same_bits(ys[1], ys[2], "load_memory vs load_builtin");
}

// A caller compiled against a later header, whose opfuse_tensor has one more field: an array of two
// inputs is walked with the caller's stride (struct_size), not the library's sizeof.
TEST(CApi, TensorArraysFromANewerHeaderUseTheirStride) {
  struct NewerTensor {
    opfuse_tensor t;
    std::uint64_t future_field;  // zero: what this library does anyway
  };
  Model m;
  ASSERT_EQ(opfuse_model_load_builtin("bert_layer", &m.p), OPFUSE_OK) << last_error();
  const opfuse_session_options o = options();
  Session s;
  ASSERT_EQ(opfuse_session_create(m.p, &o, &s.p), OPFUSE_OK) << last_error();
  const std::vector<std::int64_t> hd{1, 6, 768}, md{1, 1, 1, 6};
  const std::vector<float> h = random_floats(numel(hd), 17);
  std::vector<float> mask(numel(md), 0.f);
  mask[0] = -10000.f;
  std::vector<float> y(numel(hd)), y_newer(numel(hd));
  const opfuse_tensor in[] = {tensor(nullptr, hd, h), tensor(nullptr, md, mask)};
  opfuse_tensor out = tensor(nullptr, hd, y);
  ASSERT_EQ(opfuse_session_run(s.p, in, 2, &out, 1), OPFUSE_OK) << last_error();
  NewerTensor newer_in[] = {{in[0], 0}, {in[1], 0}}, newer_out[] = {{tensor(nullptr, hd, y_newer), 0}};
  for (NewerTensor& t : newer_in) t.t.struct_size = sizeof(NewerTensor);
  newer_out[0].t.struct_size = sizeof(NewerTensor);
  std::size_t rank = 0;
  std::int64_t d[3];
  ASSERT_EQ(opfuse_session_resolve_output_dims(s.p, &newer_in[0].t, 2, 0, d, 3, &rank), OPFUSE_OK) << last_error();
  EXPECT_EQ(std::vector<std::int64_t>(d, d + 3), hd);
  ASSERT_EQ(opfuse_session_run(s.p, &newer_in[0].t, 2, &newer_out[0].t, 1), OPFUSE_OK) << last_error();
  expect_same_bits(y_newer, y, "newer struct layout");
  newer_in[1].future_field = 1;
  EXPECT_EQ(opfuse_session_run(s.p, &newer_in[0].t, 2, &newer_out[0].t, 1), OPFUSE_UNSUPPORTED);
  EXPECT_NE(last_error().find("inputs[1] has a nonzero byte at offset 56"), std::string::npos) << last_error();
}

// Like Plan::run, a C run with input dims already planned allocates nothing: the layer reuses
// its TensorRef vectors and builds messages only on error.
TEST(CApi, RunAllocatesNothingOnceSpecialized) {
  Model m;
  ASSERT_EQ(opfuse_model_load_builtin("bert_layer", &m.p), OPFUSE_OK) << last_error();
  const opfuse_session_options o = options();
  Session s;
  ASSERT_EQ(opfuse_session_create(m.p, &o, &s.p), OPFUSE_OK) << last_error();
  const std::vector<std::int64_t> hd{1, 12, 768}, md{1, 1, 1, 12};
  const std::vector<float> h = random_floats(numel(hd), 23), mask(numel(md), 0.f);
  std::vector<float> y(numel(hd));
  const opfuse_tensor in[] = {tensor("hidden_states", hd, h), tensor("attention_mask", md, mask)};
  opfuse_tensor out = tensor("output", hd, y);
  ASSERT_EQ(opfuse_session_run(s.p, in, 2, &out, 1), OPFUSE_OK) << last_error();
  const long before = opfuse::testing::allocations();
  const opfuse_status st = opfuse_session_run(s.p, in, 2, &out, 1);
  const long allocs = opfuse::testing::allocations() - before;
  ASSERT_EQ(st, OPFUSE_OK) << last_error();
  EXPECT_EQ(allocs, 0) << "heap allocations in one C API run";
}

// A session keeps what it needs of the model; NULL options are the defaults.
TEST(CApi, SessionOutlivesItsModel) {
  Model m;
  ASSERT_EQ(opfuse_model_load_builtin("bert_layer", &m.p), OPFUSE_OK) << last_error();
  Session s;
  ASSERT_EQ(opfuse_session_create(m.p, nullptr, &s.p), OPFUSE_OK) << last_error();
  opfuse_model_destroy(m.p);
  m.p = nullptr;
  const std::vector<std::int64_t> hd{1, 2, 768}, md{1, 1, 1, 2};
  const std::vector<float> h = random_floats(numel(hd), 9), mask(numel(md), 0.f);
  const opfuse_tensor in[] = {tensor(nullptr, hd, h), tensor(nullptr, md, mask)};
  std::vector<float> y(numel(hd));
  opfuse_tensor out = tensor(nullptr, hd, y);
  ASSERT_EQ(opfuse_session_run(s.p, in, 2, &out, 1), OPFUSE_OK) << last_error();
  EXPECT_STREQ(opfuse_session_input_name(s.p, 1), "attention_mask");
}

// What the header promises about threads: sessions of one model created and run on two threads at
// once, and an error message per thread.
TEST(CApi, SessionsOnTwoThreadsShareOneModel) {
  Model m;
  ASSERT_EQ(opfuse_model_load_builtin("bert_layer", &m.p), OPFUSE_OK) << last_error();
  const std::vector<std::int64_t> hd{1, 8, 768}, md{1, 1, 1, 8};
  const std::vector<float> h = random_floats(numel(hd), 21), mask(numel(md), 0.f);
  std::vector<float> y[2] = {std::vector<float>(numel(hd)), std::vector<float>(numel(hd))};
  opfuse_status st[2] = {OPFUSE_INTERNAL, OPFUSE_INTERNAL};
  std::string err[2];
  auto work = [&](int t) {
    const opfuse_session_options o = options();
    opfuse_session* s = nullptr;
    st[t] = opfuse_session_create(m.p, &o, &s);
    if (st[t] != OPFUSE_OK) return void(err[t] = opfuse_last_error());
    const opfuse_tensor in[] = {tensor(nullptr, hd, h), tensor(nullptr, md, mask)};
    opfuse_tensor out = tensor(nullptr, hd, y[t]);
    for (int r = 0; r < 3 && st[t] == OPFUSE_OK; ++r) st[t] = opfuse_session_run(s, in, 2, &out, 1);
    if (st[t] != OPFUSE_OK) err[t] = opfuse_last_error();
    opfuse_session_destroy(s);
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
  EXPECT_EQ(st[0], OPFUSE_OK) << err[0];
  EXPECT_EQ(st[1], OPFUSE_OK) << err[1];
  expect_same_bits(y[0], y[1], "two threads");
}

// ---- error paths ----------------------------------------------------------------------------

// The message of the last failure, checked to name the function and the offending thing.
void expect_error(opfuse_status got, opfuse_status want, std::initializer_list<const char*> parts) {
  EXPECT_EQ(got, want) << "got " << opfuse_status_name(got) << ": " << last_error();
  const std::string msg = last_error();
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(CApiErrors, LoadFileBadPath) {
  opfuse_model* m = reinterpret_cast<opfuse_model*>(0x1);  // must come back NULL
  expect_error(opfuse_model_load_file("/nonexistent/dir/model.onnx", &m), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_model_load_file: ", "/nonexistent/dir/model.onnx"});
  EXPECT_EQ(m, nullptr);
}

TEST(CApiErrors, LoadFileNotAModel) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("opfuse_capi_junk_" + std::to_string(::getpid()) + ".onnx")).string();
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fputs("not an onnx model at all", f);
  std::fclose(f);
  opfuse_model* m = nullptr;
  const opfuse_status st = opfuse_model_load_file(path.c_str(), &m);
  std::filesystem::remove(path);
  expect_error(st, OPFUSE_INVALID_ARGUMENT, {"opfuse_model_load_file: ", path.c_str()});
  EXPECT_EQ(m, nullptr);
}

TEST(CApiErrors, LoadMemoryGarbage) {
  const char junk[] = "\x08\x96\x01garbage bytes, not a ModelProto \xff\xff\xff";
  opfuse_model* m = reinterpret_cast<opfuse_model*>(0x1);
  expect_error(opfuse_model_load_memory(junk, sizeof junk, &m), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_model_load_memory: "});
  EXPECT_EQ(m, nullptr);
  EXPECT_GT(last_error().size(), std::strlen("opfuse_model_load_memory: ")) << "no reason given";
  // A truncated model is refused too.
  auto bytes = opfuse::Model::builtin_bytes("mobilenet_v2");
  ASSERT_TRUE(bytes);
  expect_error(opfuse_model_load_memory(bytes->data(), 5000, &m), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_model_load_memory: "});
  EXPECT_EQ(m, nullptr);
}

TEST(CApiErrors, LoadBuiltinUnknown) {
  opfuse_model* m = reinterpret_cast<opfuse_model*>(0x1);
  expect_error(opfuse_model_load_builtin("no_such_model", &m), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_model_load_builtin: ", "no_such_model", "mobilenet_v2"});
  EXPECT_EQ(m, nullptr);
}

// One mobilenet_v2 session for the error paths of run: all of them are refused before any work.
class CApiRunErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(opfuse_model_load_builtin("mobilenet_v2", &model_), OPFUSE_OK) << opfuse_last_error();
    const opfuse_session_options o = options();
    ASSERT_EQ(opfuse_session_create(model_, &o, &session_), OPFUSE_OK) << opfuse_last_error();
  }
  static void TearDownTestSuite() {
    opfuse_session_destroy(session_);
    opfuse_model_destroy(model_);
    session_ = nullptr;
    model_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(session_, nullptr);
    x_ = std::vector<float>(numel(xd_), 0.5f);
    y_ = std::vector<float>(numel(yd_), kSentinel);
    in_ = tensor("input", xd_, x_);
    out_ = tensor("output", yd_, y_);
  }
  // The run fails with `want` and a message holding `parts`, and leaves the output untouched.
  void expect_refused(opfuse_status want, std::initializer_list<const char*> parts) {
    expect_error(opfuse_session_run(session_, &in_, 1, &out_, 1), want, parts);
    EXPECT_NE(last_error().find("opfuse_session_run: "), std::string::npos) << last_error();
    std::size_t touched = 0;
    for (float v : y_) touched += std::memcmp(&v, &kSentinel, sizeof v) != 0;
    EXPECT_EQ(touched, 0u) << "the run failed but wrote " << touched << " output elements";
  }
  static constexpr float kSentinel = -12345.5f;
  static opfuse_model* model_;
  static opfuse_session* session_;
  std::vector<std::int64_t> xd_{1, 3, 224, 224}, yd_{1, 1000};
  std::vector<float> x_, y_;
  opfuse_tensor in_{}, out_{};
};
opfuse_model* CApiRunErrors::model_ = nullptr;
opfuse_session* CApiRunErrors::session_ = nullptr;

TEST_F(CApiRunErrors, SentinelRunSucceedsAndWrites) {
  // The control for the tests below: the same buffers, right, are accepted and written.
  ASSERT_EQ(opfuse_session_run(session_, &in_, 1, &out_, 1), OPFUSE_OK) << last_error();
  std::size_t touched = 0;
  for (float v : y_) touched += v != kSentinel;
  EXPECT_EQ(touched, y_.size());
}

TEST_F(CApiRunErrors, WrongInputShape) {
  xd_[2] = 225;
  x_.resize(numel(xd_));
  in_ = tensor("input", xd_, x_);
  expect_refused(OPFUSE_INVALID_ARGUMENT, {"input 'input'", "dim 2", "225", "224"});
}

TEST_F(CApiRunErrors, WrongInputRank) {
  const std::vector<std::int64_t> d{3, 224, 224};
  in_ = tensor("input", d, x_);
  in_.byte_size = numel(d) * sizeof(float);
  expect_refused(OPFUSE_INVALID_ARGUMENT, {"input 'input'", "rank 3", "rank 4"});
}

TEST_F(CApiRunErrors, WrongInputByteSize) {
  in_.byte_size -= 4;
  expect_refused(OPFUSE_INVALID_ARGUMENT, {"input 'input' byte_size is 602108, expected 602112", "1x3x224x224"});
}

TEST_F(CApiRunErrors, WrongOutputByteSize) {
  out_.byte_size = 4;
  expect_refused(OPFUSE_INVALID_ARGUMENT, {"output 'output' byte_size is 4, expected 4000", "1x1000"});
}

TEST_F(CApiRunErrors, WrongOutputDims) {
  const std::vector<std::int64_t> d{1, 999};
  out_ = tensor("output", d, y_);
  out_.byte_size = numel(d) * sizeof(float);
  expect_refused(OPFUSE_INVALID_ARGUMENT, {"output 'output'", "1x1000", "1x999"});
}

TEST_F(CApiRunErrors, WrongInputDtype) {
  // An i64 buffer of the right byte_size for i64: refused for its dtype, not its size.
  in_.dtype = OPFUSE_DTYPE_I64;
  in_.byte_size = numel(xd_) * 8;
  std::vector<std::int64_t> big(numel(xd_));
  in_.data = big.data();
  expect_refused(OPFUSE_INVALID_ARGUMENT, {"input 'input' dtype is i64, the model declares f32"});
}

TEST_F(CApiRunErrors, WrongOutputDtype) {
  out_.dtype = OPFUSE_DTYPE_BOOL;
  out_.byte_size = numel(yd_);
  expect_refused(OPFUSE_INVALID_ARGUMENT, {"output 'output' dtype is bool, the model declares f32"});
}

TEST_F(CApiRunErrors, DtypeOutOfRange) {
  in_.dtype = static_cast<opfuse_dtype>(7);
  expect_refused(OPFUSE_INVALID_ARGUMENT, {"input 'input' dtype 7 is not an opfuse_dtype"});
}

TEST_F(CApiRunErrors, UnknownInputName) {
  in_.name = "pixels";
  expect_refused(OPFUSE_INVALID_ARGUMENT, {"no input named 'pixels'"});
}

TEST_F(CApiRunErrors, UnknownOutputName) {
  out_.name = "logits";
  expect_refused(OPFUSE_INVALID_ARGUMENT, {"no output named 'logits'"});
}

TEST_F(CApiRunErrors, WrongCounts) {
  expect_error(opfuse_session_run(session_, &in_, 0, &out_, 1), OPFUSE_INVALID_ARGUMENT, {"1 inputs", "0 given"});
  opfuse_tensor outs[2] = {out_, out_};
  expect_error(opfuse_session_run(session_, &in_, 1, outs, 2), OPFUSE_INVALID_ARGUMENT,
               {"1 outputs", "2 buffers given"});
}

TEST_F(CApiRunErrors, NullDataAndDims) {
  in_.data = nullptr;
  expect_refused(OPFUSE_INVALID_ARGUMENT, {"input 'input' data is NULL"});
  SetUp();
  in_.dims = nullptr;
  expect_refused(OPFUSE_INVALID_ARGUMENT, {"input 'input' dims is NULL but rank is 4"});
  SetUp();
  expect_error(opfuse_session_run(session_, nullptr, 1, &out_, 1), OPFUSE_INVALID_ARGUMENT, {"inputs is NULL"});
  expect_error(opfuse_session_run(session_, &in_, 1, nullptr, 1), OPFUSE_INVALID_ARGUMENT, {"outputs is NULL"});
}

TEST_F(CApiRunErrors, NegativeDim) {
  xd_[0] = -1;
  in_ = tensor("input", xd_, x_);
  expect_refused(OPFUSE_INVALID_ARGUMENT, {"input 'input' dim 0 is -1, must be >= 0"});
}

TEST_F(CApiRunErrors, UnnamedTensorsAreNamedByPosition) {
  in_.name = nullptr;
  in_.byte_size = 1;
  expect_refused(OPFUSE_INVALID_ARGUMENT, {"input 'input' (inputs[0]) byte_size is 1"});
}

TEST_F(CApiRunErrors, TensorStructSizeTooSmall) {
  in_.struct_size = 8;
  expect_refused(OPFUSE_INVALID_ARGUMENT, {"inputs[0].struct_size is 8", "sizeof(opfuse_tensor)"});
  SetUp();
  opfuse_tensor outs[2] = {out_, out_};
  outs[1].struct_size = sizeof(opfuse_tensor) + 8;
  expect_error(opfuse_session_run(session_, &in_, 1, outs, 2), OPFUSE_INVALID_ARGUMENT,
               {"outputs[1].struct_size", "must agree"});
}

// A caller compiled against a later header, whose opfuse_tensor has one more field: the array is
// walked with its stride; a zero new field is accepted, a nonzero one refused.
TEST_F(CApiRunErrors, TensorsFromANewerHeader) {
  struct NewerTensor {
    opfuse_tensor t;
    std::uint64_t future_field;
  };
  NewerTensor in{in_, 0}, out{out_, 0};
  in.t.struct_size = out.t.struct_size = sizeof(NewerTensor);
  ASSERT_EQ(opfuse_session_run(session_, &in.t, 1, &out.t, 1), OPFUSE_OK) << last_error();
  std::vector<float> y_plain(y_.size());
  out_.data = y_plain.data();
  ASSERT_EQ(opfuse_session_run(session_, &in_, 1, &out_, 1), OPFUSE_OK) << last_error();
  expect_same_bits(y_, y_plain, "newer struct layout");
  std::fill(y_.begin(), y_.end(), kSentinel);
  out_.data = y_.data();
  in.future_field = 1;
  expect_error(opfuse_session_run(session_, &in.t, 1, &out.t, 1), OPFUSE_UNSUPPORTED,
               {"inputs[0] has a nonzero byte at offset 56"});
  for (float v : y_) ASSERT_EQ(v, kSentinel);
}

TEST_F(CApiRunErrors, ResolveOutputDimsErrors) {
  std::int64_t d[2];
  std::size_t rank = 99;
  expect_error(opfuse_session_resolve_output_dims(session_, &in_, 1, 0, d, 1, &rank), OPFUSE_INVALID_ARGUMENT,
               {"capacity 1 is less than the rank 2"});
  EXPECT_EQ(rank, 2u);
  expect_error(opfuse_session_resolve_output_dims(session_, &in_, 1, 1, d, 2, &rank), OPFUSE_INVALID_ARGUMENT,
               {"index 1 is out of range (the model has 1 outputs)"});
  in_.byte_size = 3;  // data given: its size is checked
  expect_error(opfuse_session_resolve_output_dims(session_, &in_, 1, 0, d, 2, &rank), OPFUSE_INVALID_ARGUMENT,
               {"byte_size is 3"});
  in_.data = nullptr;  // no data: only the dims matter
  ASSERT_EQ(opfuse_session_resolve_output_dims(session_, &in_, 1, 0, d, 2, &rank), OPFUSE_OK) << last_error();
  EXPECT_EQ(d[0], 1);
  EXPECT_EQ(d[1], 1000);
}

TEST_F(CApiRunErrors, QueryIndexOutOfRange) {
  EXPECT_EQ(opfuse_session_input_name(session_, 1), nullptr);
  EXPECT_NE(last_error().find("opfuse_session_input_name: index 1 is out of range (the model has 1 inputs)"),
            std::string::npos)
      << last_error();
  EXPECT_EQ(opfuse_session_output_name(session_, 5), nullptr);
  EXPECT_NE(last_error().find("index 5"), std::string::npos) << last_error();
  opfuse_dtype dt;
  expect_error(opfuse_session_input_dtype(session_, 2, &dt), OPFUSE_INVALID_ARGUMENT, {"index 2"});
  expect_error(opfuse_session_output_dtype(session_, 2, &dt), OPFUSE_INVALID_ARGUMENT, {"index 2"});
  std::size_t rank = 0;
  expect_error(opfuse_session_input_dims(session_, 3, nullptr, 0, &rank), OPFUSE_INVALID_ARGUMENT, {"index 3"});
  expect_error(opfuse_session_output_dims(session_, 3, nullptr, 0, &rank), OPFUSE_INVALID_ARGUMENT, {"index 3"});
  std::int64_t d[4];
  expect_error(opfuse_session_input_dims(session_, 0, d, 2, &rank), OPFUSE_INVALID_ARGUMENT,
               {"capacity 2 is less than the rank 4 (1x3x224x224)"});
  EXPECT_EQ(rank, 4u);
  expect_error(opfuse_session_input_dims(session_, 0, nullptr, 4, &rank), OPFUSE_INVALID_ARGUMENT,
               {"dims is NULL but capacity is 4"});
  EXPECT_EQ(opfuse_session_input_dim_symbol(session_, 0, 4), nullptr);
  EXPECT_NE(last_error().find("dim 4 is out of range (input 'input' has rank 4)"), std::string::npos) << last_error();
  EXPECT_EQ(opfuse_session_output_dim_symbol(session_, 1, 0), nullptr);
  EXPECT_NE(last_error().find("index 1"), std::string::npos) << last_error();
}

// Every function taking a handle refuses NULL with a message naming it.
TEST(CApiErrors, NullHandles) {
  opfuse_session* s = reinterpret_cast<opfuse_session*>(0x1);
  expect_error(opfuse_session_create(nullptr, nullptr, &s), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_create: model is NULL"});
  EXPECT_EQ(s, nullptr);
  EXPECT_EQ(opfuse_session_input_count(nullptr), 0u);
  EXPECT_EQ(last_error(), "opfuse_session_input_count: session is NULL");
  EXPECT_EQ(opfuse_session_output_count(nullptr), 0u);
  EXPECT_EQ(last_error(), "opfuse_session_output_count: session is NULL");
  EXPECT_EQ(opfuse_session_input_name(nullptr, 0), nullptr);
  EXPECT_EQ(last_error(), "opfuse_session_input_name: session is NULL");
  EXPECT_EQ(opfuse_session_output_name(nullptr, 0), nullptr);
  EXPECT_EQ(last_error(), "opfuse_session_output_name: session is NULL");
  opfuse_dtype dt;
  expect_error(opfuse_session_input_dtype(nullptr, 0, &dt), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_input_dtype: session is NULL"});
  expect_error(opfuse_session_output_dtype(nullptr, 0, &dt), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_output_dtype: session is NULL"});
  std::size_t rank;
  std::int64_t d[4];
  expect_error(opfuse_session_input_dims(nullptr, 0, d, 4, &rank), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_input_dims: session is NULL"});
  expect_error(opfuse_session_output_dims(nullptr, 0, d, 4, &rank), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_output_dims: session is NULL"});
  EXPECT_EQ(opfuse_session_input_dim_symbol(nullptr, 0, 0), nullptr);
  EXPECT_EQ(last_error(), "opfuse_session_input_dim_symbol: session is NULL");
  EXPECT_EQ(opfuse_session_output_dim_symbol(nullptr, 0, 0), nullptr);
  EXPECT_EQ(last_error(), "opfuse_session_output_dim_symbol: session is NULL");
  expect_error(opfuse_session_resolve_output_dims(nullptr, nullptr, 0, 0, d, 4, &rank), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_resolve_output_dims: session is NULL"});
  expect_error(opfuse_session_run(nullptr, nullptr, 0, nullptr, 0), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_run: session is NULL"});
  expect_error(opfuse_session_options_init(nullptr, sizeof(opfuse_session_options)), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_options_init: options is NULL"});
  // The destroy functions take NULL like free().
  opfuse_session_destroy(nullptr);
  opfuse_model_destroy(nullptr);
  // NULL inputs to the loaders.
  opfuse_model* m = reinterpret_cast<opfuse_model*>(0x1);
  expect_error(opfuse_model_load_file(nullptr, &m), OPFUSE_INVALID_ARGUMENT, {"opfuse_model_load_file: path is NULL"});
  EXPECT_EQ(m, nullptr);
  expect_error(opfuse_model_load_memory(nullptr, 10, &m), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_model_load_memory: data is NULL"});
  expect_error(opfuse_model_load_builtin(nullptr, &m), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_model_load_builtin: name is NULL"});
}

// Every function with an out-pointer refuses NULL with a message naming it.
TEST(CApiErrors, NullOutPointers) {
  expect_error(opfuse_model_load_file("x.onnx", nullptr), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_model_load_file: out is NULL"});
  const char bytes[4] = {};
  expect_error(opfuse_model_load_memory(bytes, 4, nullptr), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_model_load_memory: out is NULL"});
  expect_error(opfuse_model_load_builtin("bert_layer", nullptr), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_model_load_builtin: out is NULL"});
  Model m;
  ASSERT_EQ(opfuse_model_load_builtin("bert_layer", &m.p), OPFUSE_OK) << last_error();
  expect_error(opfuse_session_create(m.p, nullptr, nullptr), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_create: out is NULL"});
  Session s;
  ASSERT_EQ(opfuse_session_create(m.p, nullptr, &s.p), OPFUSE_OK) << last_error();
  expect_error(opfuse_session_input_dtype(s.p, 0, nullptr), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_input_dtype: dtype is NULL"});
  expect_error(opfuse_session_output_dtype(s.p, 0, nullptr), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_output_dtype: dtype is NULL"});
  std::int64_t d[4];
  expect_error(opfuse_session_input_dims(s.p, 0, d, 4, nullptr), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_input_dims: rank is NULL"});
  expect_error(opfuse_session_output_dims(s.p, 0, d, 4, nullptr), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_output_dims: rank is NULL"});
  expect_error(opfuse_session_resolve_output_dims(s.p, nullptr, 0, 0, d, 4, nullptr), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_resolve_output_dims: rank is NULL"});
}

TEST(CApiErrors, OptionsStructSizeTooSmall) {
  opfuse_session_options o;
  std::memset(&o, 0xab, sizeof o);
  expect_error(opfuse_session_options_init(&o, sizeof o - 1), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_options_init: struct_size is 31, at least 32"});
  const unsigned char* b = reinterpret_cast<const unsigned char*>(&o);
  for (std::size_t i = 0; i < sizeof o; ++i) ASSERT_EQ(b[i], 0xab) << "byte " << i << " written on error";
  Model m;
  ASSERT_EQ(opfuse_model_load_builtin("bert_layer", &m.p), OPFUSE_OK) << last_error();
  ASSERT_EQ(opfuse_session_options_init(&o, sizeof o), OPFUSE_OK);
  o.struct_size = sizeof(std::size_t) + 3 * sizeof(std::int32_t);  // a struct that ends before the budget
  opfuse_session* s = reinterpret_cast<opfuse_session*>(0x1);
  expect_error(opfuse_session_create(m.p, &o, &s), OPFUSE_INVALID_ARGUMENT,
               {"opfuse_session_create: options->struct_size is 20, at least 32"});
  EXPECT_EQ(s, nullptr);
}

// A caller compiled against a later header, whose options have one more field: init fills what it
// knows and zeroes the rest; create accepts zero there and refuses anything else.
TEST(CApiErrors, OptionsFromANewerHeader) {
  struct NewerOptions {
    opfuse_session_options o;
    std::uint64_t future_field;
  } n;
  std::memset(&n, 0xab, sizeof n);
  ASSERT_EQ(opfuse_session_options_init(&n.o, sizeof n), OPFUSE_OK) << last_error();
  EXPECT_EQ(n.o.struct_size, sizeof n);
  EXPECT_EQ(n.o.stage, OPFUSE_STAGE_FUSED);
  EXPECT_EQ(n.o.fusion, OPFUSE_FUSION_FULL);
  EXPECT_EQ(n.o.threads, 0);
  EXPECT_EQ(n.o.max_cached_shapes, 8);
  EXPECT_EQ(n.o.memory_budget, 16ull << 30);
  EXPECT_EQ(n.future_field, 0u);
  Model m;
  ASSERT_EQ(opfuse_model_load_builtin("bert_layer", &m.p), OPFUSE_OK) << last_error();
  {
    Session s;
    EXPECT_EQ(opfuse_session_create(m.p, &n.o, &s.p), OPFUSE_OK) << last_error();
  }
  n.future_field = 2;
  opfuse_session* s = nullptr;
  expect_error(opfuse_session_create(m.p, &n.o, &s), OPFUSE_UNSUPPORTED,
               {"options has a nonzero byte at offset 32", OPFUSE_VERSION_STRING});
  EXPECT_EQ(s, nullptr);
}

TEST(CApiErrors, OptionValuesOutOfRange) {
  Model m;
  ASSERT_EQ(opfuse_model_load_builtin("bert_layer", &m.p), OPFUSE_OK) << last_error();
  struct Case {
    void (*set)(opfuse_session_options&);
    const char* message;
  };
  const Case cases[] = {
      {[](opfuse_session_options& o) { o.stage = 3; }, "options->stage 3 is not an opfuse_stage"},
      {[](opfuse_session_options& o) { o.stage = -1; }, "options->stage -1 is not an opfuse_stage"},
      {[](opfuse_session_options& o) { o.fusion = 4; }, "options->fusion 4 is not an opfuse_fusion"},
      {[](opfuse_session_options& o) { o.threads = -2; }, "options->threads -2 must be >= 0"},
      {[](opfuse_session_options& o) { o.max_cached_shapes = 0; }, "options->max_cached_shapes 0 must be >= 1"},
      {[](opfuse_session_options& o) { o.memory_budget = 0; }, "options->memory_budget is 0 bytes"},
  };
  for (const Case& c : cases) {
    opfuse_session_options o = options();
    c.set(o);
    opfuse_session* s = nullptr;
    expect_error(opfuse_session_create(m.p, &o, &s), OPFUSE_INVALID_ARGUMENT, {"opfuse_session_create: ", c.message});
    EXPECT_EQ(s, nullptr);
  }
}

// A budget below the weights: a model with static inputs is planned at create, so it is refused
// there, as out of memory.
TEST(CApiErrors, MemoryBudgetExceeded) {
  Model m;
  ASSERT_EQ(opfuse_model_load_builtin("mobilenet_v2", &m.p), OPFUSE_OK) << last_error();
  opfuse_session_options o = options();
  o.memory_budget = 1 << 20;
  opfuse_session* s = nullptr;
  expect_error(opfuse_session_create(m.p, &o, &s), OPFUSE_OUT_OF_MEMORY,
               {"opfuse_session_create: ", "over the memory budget of 1048576 bytes"});
  EXPECT_EQ(s, nullptr);
}

// The message is per thread, kept until the next failure there.
TEST(CApiErrors, LastErrorIsPerThread) {
  opfuse_model* m = nullptr;
  ASSERT_NE(opfuse_model_load_builtin("main_thread_model", &m), OPFUSE_OK);
  const std::string mine = last_error();
  ASSERT_NE(mine.find("main_thread_model"), std::string::npos) << mine;
  std::string before, after;
  std::thread t([&] {
    before = opfuse_last_error();
    opfuse_model* m2 = nullptr;
    (void)opfuse_model_load_builtin("other_thread_model", &m2);
    after = opfuse_last_error();
  });
  t.join();
  EXPECT_EQ(before, "");
  EXPECT_NE(after.find("other_thread_model"), std::string::npos) << after;
  EXPECT_EQ(last_error(), mine);
  // A success leaves it as it was.
  EXPECT_STREQ(opfuse_version(), OPFUSE_VERSION_STRING);
  EXPECT_EQ(last_error(), mine);
}

}  // namespace
