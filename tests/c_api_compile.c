/* tests/c_api_compile.c - the C API from C: opfuse.h compiles as C99 with -Wall -Wextra -pedantic
 * -Werror, every function links, and a small run works (ctest: capi.c_check).
 *
 * It loads bert_layer (whose sequence length is symbolic), resolves its output dims for a short
 * sequence, runs it and checks the output is finite and not all zero; then a few error paths from
 * C: a NULL handle, an unknown model, a wrong byte_size that must leave the output untouched.
 * tests/test_c_api.cpp covers the rest from C++. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opfuse/opfuse.h"

static int failures = 0;

#define CHECK(cond)                                                                                                  \
  do {                                                                                                               \
    if (!(cond)) {                                                                                                   \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, opfuse_last_error()); \
      ++failures;                                                                                                    \
    }                                                                                                                \
  } while (0)

static int contains(const char* haystack, const char* needle) { return strstr(haystack, needle) != NULL; }

int main(void) {
  enum { kSeq = 4, kHidden = 768 };
  opfuse_model* model = NULL;
  opfuse_session* session = NULL;
  opfuse_session_options opt;
  size_t i, rank = 0, n_in, n_out, nonzero = 0;
  int64_t dims[4];
  opfuse_dtype dtype = OPFUSE_DTYPE_BOOL;
  static float hidden[kSeq * kHidden], mask[kSeq], out[kSeq * kHidden];
  const int64_t hidden_dims[3] = {1, kSeq, kHidden}, mask_dims[4] = {1, 1, 1, kSeq};
  opfuse_tensor inputs[2];
  opfuse_tensor output;

  /* Versions and names. */
  CHECK(strcmp(opfuse_version(), OPFUSE_VERSION_STRING) == 0);
#ifdef OPFUSE_CMAKE_VERSION
  CHECK(strcmp(opfuse_version(), OPFUSE_CMAKE_VERSION) == 0);
#endif
  CHECK(strcmp(opfuse_status_name(OPFUSE_INVALID_ARGUMENT), "invalid_argument") == 0);
  CHECK(opfuse_dtype_size(OPFUSE_DTYPE_F32) == sizeof(float));
  CHECK(strcmp(opfuse_dtype_name(OPFUSE_DTYPE_I64), "i64") == 0);
  CHECK(opfuse_builtin_model_count() >= 3);
  CHECK(opfuse_builtin_model_name(0) != NULL);

  /* Load, compile, query. */
  CHECK(opfuse_model_load_builtin("bert_layer", &model) == OPFUSE_OK);
  CHECK(opfuse_session_options_init(&opt, sizeof opt) == OPFUSE_OK);
  opt.threads = 1;
  CHECK(opfuse_session_create(model, &opt, &session) == OPFUSE_OK);
  opfuse_model_destroy(model); /* the session keeps what it needs */
  if (!session) {
    fprintf(stderr, "no session: %s\n", opfuse_last_error());
    return 1;
  }
  n_in = opfuse_session_input_count(session);
  n_out = opfuse_session_output_count(session);
  CHECK(n_in == 2 && n_out == 1);
  CHECK(strcmp(opfuse_session_input_name(session, 0), "hidden_states") == 0);
  CHECK(strcmp(opfuse_session_output_name(session, 0), "output") == 0);
  CHECK(opfuse_session_input_dtype(session, 0, &dtype) == OPFUSE_OK && dtype == OPFUSE_DTYPE_F32);
  dtype = OPFUSE_DTYPE_BOOL;
  CHECK(opfuse_session_output_dtype(session, 0, &dtype) == OPFUSE_OK && dtype == OPFUSE_DTYPE_F32);
  CHECK(opfuse_session_input_dims(session, 0, dims, 4, &rank) == OPFUSE_OK && rank == 3 && dims[1] == -1 &&
        dims[2] == kHidden);
  CHECK(strcmp(opfuse_session_input_dim_symbol(session, 0, 1), "seq") == 0);
  CHECK(opfuse_session_output_dims(session, 0, NULL, 0, &rank) == OPFUSE_OK && rank == 3);
  CHECK(strcmp(opfuse_session_output_dim_symbol(session, 0, 2), "") == 0);

  /* Run at seq = kSeq, bound by position (NULL names). */
  for (i = 0; i < kSeq * kHidden; ++i) hidden[i] = (float)sin(0.01 * (double)i);
  memset(mask, 0, sizeof mask);
  inputs[0].struct_size = sizeof(opfuse_tensor);
  inputs[0].name = NULL;
  inputs[0].dtype = OPFUSE_DTYPE_F32;
  inputs[0].rank = 3;
  inputs[0].dims = hidden_dims;
  inputs[0].data = hidden;
  inputs[0].byte_size = sizeof hidden;
  inputs[1] = inputs[0];
  inputs[1].rank = 4;
  inputs[1].dims = mask_dims;
  inputs[1].data = mask;
  inputs[1].byte_size = sizeof mask;
  CHECK(opfuse_session_resolve_output_dims(session, inputs, 2, 0, dims, 4, &rank) == OPFUSE_OK && rank == 3 &&
        dims[0] == 1 && dims[1] == kSeq && dims[2] == kHidden);
  output = inputs[0];
  output.data = out;
  output.byte_size = sizeof out;
  CHECK(opfuse_session_run(session, inputs, 2, &output, 1) == OPFUSE_OK);
  for (i = 0; i < kSeq * kHidden; ++i) {
    CHECK(isfinite(out[i]));
    nonzero += out[i] != 0.0f;
  }
  CHECK(nonzero > kSeq * kHidden / 2);

  /* Errors: each a status and a message naming what is wrong; the output left as it was. */
  CHECK(opfuse_session_input_count(NULL) == 0 && contains(opfuse_last_error(), "session is NULL"));
  model = (opfuse_model*)&failures;
  CHECK(opfuse_model_load_builtin("no_such_model", &model) == OPFUSE_INVALID_ARGUMENT && model == NULL &&
        contains(opfuse_last_error(), "no_such_model"));
  CHECK(opfuse_model_load_file("/nonexistent/model.onnx", &model) == OPFUSE_INVALID_ARGUMENT &&
        contains(opfuse_last_error(), "/nonexistent/model.onnx"));
  CHECK(opfuse_model_load_memory("junk", 4, &model) == OPFUSE_INVALID_ARGUMENT && model == NULL);
  for (i = 0; i < kSeq * kHidden; ++i) out[i] = -1.0f;
  output.byte_size = sizeof out - 1;
  CHECK(opfuse_session_run(session, inputs, 2, &output, 1) == OPFUSE_INVALID_ARGUMENT &&
        contains(opfuse_last_error(), "output 'output' (outputs[0]) byte_size is"));
  for (i = 0; i < kSeq * kHidden; ++i) CHECK(out[i] == -1.0f);

  opfuse_session_destroy(session);
  if (failures) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("opfuse %s: the C API works from C99\n", opfuse_version());
  return 0;
}
