/* examples/classify.c - classify an input with opfuse's C API (opfuse/opfuse.h).
 *
 *  classify_c [--threads N] [--stage naive|simd|fused] MODEL [INPUT]
 *
 * MODEL is a built-in model name (resnet50, mobilenet_v2, bert_layer) or the path of an .onnx file.
 * INPUT, for the first model input, is an ONNX TensorProto file (.pb, FLOAT, as in the ONNX test
 * data) or raw little-endian float32 (.raw or .bin, exactly the input's size); without it the input
 * is generated (the same deterministic numbers as classify_cpp uses, so both programs print the
 * same answer). Symbolic dims are bound to 1 unless the .pb file gives them. Other inputs get
 * zeros. The program prints the model's inputs and outputs and the five largest values of the first
 * output with their indices.
 *
 * The steps are those of any C program embedding opfuse: load a model, create a session, ask it for
 * the shapes, allocate the buffers, run, destroy. Every call returns a status; on failure
 * opfuse_last_error() says what went wrong. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opfuse/opfuse.h"

/* ---- small helpers ---- */

static void* xcalloc(size_t n, size_t size) {
  void* p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fprintf(stderr, "classify_c: error: out of memory\n");
    exit(1);
  }
  return p;
}

static int ends_with(const char* s, const char* suffix) {
  const size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The whole file in memory; NULL (with a message) when it cannot be read. */
static unsigned char* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  unsigned char* data;
  long n;
  if (!f) {
    fprintf(stderr, "classify_c: error: cannot open input file '%s'\n", path);
    return NULL;
  }
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fprintf(stderr, "classify_c: error: cannot read input file '%s'\n", path);
    fclose(f);
    return NULL;
  }
  data = (unsigned char*)xcalloc((size_t)n, 1);
  if (fread(data, 1, (size_t)n, f) != (size_t)n) {
    fprintf(stderr, "classify_c: error: cannot read input file '%s'\n", path);
    fclose(f);
    free(data);
    return NULL;
  }
  fclose(f);
  *size = (size_t)n;
  return data;
}

/* The generated input: a 64-bit LCG, its top 24 bits scaled to [-1, 1). */
static void generate(float* x, size_t n, uint64_t seed) {
  uint64_t s = seed;
  size_t i;
  for (i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(s >> 40) / 16777216.0 * 2.0 - 1.0);
  }
}

/* ---- a minimal reader of ONNX TensorProto files (FLOAT only) ---- The protobuf wire format: each
 * field is a varint key (field number << 3 | wire type) then a varint (type 0), 8 bytes (1), a
 * varint length and that many bytes (2), or 4 bytes (5). A TensorProto keeps its dims in field 1,
 * data_type in 2, float_data in 4 and raw_data in 9. */

static int varint(const unsigned char** p, const unsigned char* end, uint64_t* v) {
  int shift = 0;
  *v = 0;
  while (*p < end && shift < 64) {
    const unsigned char b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return 1;
    shift += 7;
  }
  return 0;
}

static float le_float(const unsigned char* b) {
  const uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

typedef struct {
  int64_t dims[8];
  size_t rank;
  float* data;
  size_t count, capacity;
} float_tensor;

/* Appends n little-endian floats. */
static void append_floats(float_tensor* t, const unsigned char* b, size_t n) {
  size_t k;
  if (t->count + n > t->capacity) {
    float* grown;
    t->capacity = 2 * (t->count + n);
    grown = (float*)xcalloc(t->capacity, sizeof(float));
    if (t->count) memcpy(grown, t->data, t->count * sizeof(float));
    free(t->data);
    t->data = grown;
  }
  for (k = 0; k < n; ++k) t->data[t->count++] = le_float(b + 4 * k);
}

/* Returns 1 on success; on failure prints why and returns 0. */
static int parse_tensor_proto(const unsigned char* p, size_t size, const char* path, float_tensor* t) {
  const unsigned char* end = p + size;
  const unsigned char* raw = NULL;
  size_t raw_size = 0;
  uint64_t data_type = 1, key, v;
  memset(t, 0, sizeof *t);
  while (p < end) {
    if (!varint(&p, end, &key)) goto bad;
    const unsigned field = (unsigned)(key >> 3), wire = (unsigned)(key & 7);
    if (wire == 0) {
      if (!varint(&p, end, &v)) goto bad;
      if (field == 1 && t->rank < 8) t->dims[t->rank++] = (int64_t)v;
      if (field == 2) data_type = v;
    } else if (wire == 2) {
      const unsigned char* q;
      if (!varint(&p, end, &v) || v > (uint64_t)(end - p)) goto bad;
      q = p;
      p += v;
      if (field == 1) { /* packed dims */
        while (q < p && t->rank < 8) {
          if (!varint(&q, p, &v)) goto bad;
          t->dims[t->rank++] = (int64_t)v;
        }
      } else if (field == 4) { /* packed float_data */
        append_floats(t, q, (size_t)(p - q) / 4);
      } else if (field == 9) {
        raw = q;
        raw_size = (size_t)(p - q);
      }
    } else if (wire == 5) {
      if (end - p < 4) goto bad;
      if (field == 4) append_floats(t, p, 1); /* one unpacked float_data element */
      p += 4;
    } else if (wire == 1) {
      if (end - p < 8) goto bad;
      p += 8;
    } else {
      goto bad;
    }
  }
  if (data_type != 1) {
    fprintf(stderr, "classify_c: error: '%s' holds data_type %u; this example reads FLOAT (1) tensors\n", path,
            (unsigned)data_type);
    free(t->data);
    return 0;
  }
  if (raw) {
    t->count = 0;
    append_floats(t, raw, raw_size / 4);
  }
  return 1;
bad:
  fprintf(stderr, "classify_c: error: '%s' is not a valid TensorProto file\n", path);
  free(t->data);
  return 0;
}

/* ---- printing ---- */

static void print_value(const opfuse_session* s, int is_input, size_t i) {
  const char* name = is_input ? opfuse_session_input_name(s, i) : opfuse_session_output_name(s, i);
  opfuse_dtype dtype = OPFUSE_DTYPE_F32;
  int64_t dims[16];
  size_t rank = 0, k;
  if (is_input) {
    opfuse_session_input_dtype(s, i, &dtype);
    opfuse_session_input_dims(s, i, dims, 16, &rank);
  } else {
    opfuse_session_output_dtype(s, i, &dtype);
    opfuse_session_output_dims(s, i, dims, 16, &rank);
  }
  printf("%s %zu: %s %s ", is_input ? "input " : "output", i, name, opfuse_dtype_name(dtype));
  for (k = 0; k < rank && k < 16; ++k) {
    const char* sym = is_input ? opfuse_session_input_dim_symbol(s, i, k) : opfuse_session_output_dim_symbol(s, i, k);
    if (k) printf("x");
    if (dims[k] >= 0)
      printf("%lld", (long long)dims[k]);
    else
      printf("%s", sym && sym[0] ? sym : "?");
  }
  printf("%s\n", rank ? "" : "scalar");
}

/* The five largest values, largest first (ties: the lower index first). */
static void print_top5(const char* name, const float* y, size_t n) {
  size_t best[5], k, i, j, found = 0;
  printf("top-5 of output '%s' (%zu values):\n", name, n);
  for (k = 0; k < 5 && k < n; ++k) {
    size_t b = n;
    for (i = 0; i < n; ++i) {
      int taken = 0;
      for (j = 0; j < found; ++j) taken = taken || best[j] == i;
      if (!taken && (b == n || y[i] > y[b])) b = i;
    }
    best[found++] = b;
    printf("  %zu: index %zu  score %.6f\n", k + 1, b, y[b]);
  }
}

/* ---- main ---- */

static int usage(void) {
  fprintf(stderr, "usage: classify_c [--threads N] [--stage naive|simd|fused] MODEL [INPUT.pb|INPUT.raw]\n");
  return 2;
}

static int fail(const char* what) {
  fprintf(stderr, "classify_c: error: %s: %s\n", what, opfuse_last_error());
  return 1;
}

int main(int argc, char** argv) {
  const char* model_arg = NULL;
  const char* input_path = NULL;
  opfuse_model* model = NULL;
  opfuse_session* session = NULL;
  opfuse_session_options opt;
  opfuse_tensor *inputs, *outputs;
  int64_t** dims;
  size_t i, k, n_in, n_out, builtin = 0;
  int a, rc = 1;
  float_tensor file_tensor;
  memset(&file_tensor, 0, sizeof file_tensor);

  if (opfuse_session_options_init(&opt, sizeof opt) != OPFUSE_OK) return fail("options");
  for (a = 1; a < argc; ++a) {
    if (strcmp(argv[a], "--threads") == 0 && a + 1 < argc) {
      opt.threads = atoi(argv[++a]);
    } else if (strcmp(argv[a], "--stage") == 0 && a + 1 < argc) {
      const char* s = argv[++a];
      opt.stage = strcmp(s, "naive") == 0   ? OPFUSE_STAGE_NAIVE
                  : strcmp(s, "simd") == 0  ? OPFUSE_STAGE_SIMD
                  : strcmp(s, "fused") == 0 ? OPFUSE_STAGE_FUSED
                                            : -1;
      if (opt.stage < 0) return usage();
    } else if (argv[a][0] == '-') {
      return usage();
    } else if (!model_arg) {
      model_arg = argv[a];
    } else if (!input_path) {
      input_path = argv[a];
    } else {
      return usage();
    }
  }
  if (!model_arg) return usage();

  /* A built-in name, or else a file. */
  for (i = 0; i < opfuse_builtin_model_count(); ++i)
    builtin = builtin || strcmp(opfuse_builtin_model_name(i), model_arg) == 0;
  if ((builtin ? opfuse_model_load_builtin(model_arg, &model) : opfuse_model_load_file(model_arg, &model)) != OPFUSE_OK)
    return fail("loading the model");
  /* The session keeps what it needs of the model, which can go right away. */
  if (opfuse_session_create(model, &opt, &session) != OPFUSE_OK) {
    opfuse_model_destroy(model);
    return fail("compiling the model");
  }
  opfuse_model_destroy(model);

  printf("model: %s (%s)\n", model_arg, builtin ? "built-in" : "file");
  n_in = opfuse_session_input_count(session);
  n_out = opfuse_session_output_count(session);
  for (i = 0; i < n_in; ++i) print_value(session, 1, i);
  for (i = 0; i < n_out; ++i) print_value(session, 0, i);
  if (n_out == 0) {
    fprintf(stderr, "classify_c: error: the model has no outputs\n");
    goto done;
  }

  if (input_path) {
    size_t size = 0;
    unsigned char* bytes = read_file(input_path, &size);
    if (!bytes) goto done;
    if (ends_with(input_path, ".pb")) {
      const int ok = parse_tensor_proto(bytes, size, input_path, &file_tensor);
      free(bytes);
      if (!ok) goto done;
    } else {
      append_floats(&file_tensor, bytes, size / 4);
      free(bytes);
      if (size % 4 != 0) {
        fprintf(stderr, "classify_c: error: '%s' has %zu bytes, not a whole number of float32\n", input_path, size);
        goto done;
      }
    }
  }

  /* The inputs: declared dims with each symbolic one bound to 1 (or taken from the .pb file). */
  inputs = (opfuse_tensor*)xcalloc(n_in, sizeof(opfuse_tensor));
  outputs = (opfuse_tensor*)xcalloc(n_out, sizeof(opfuse_tensor));
  dims = (int64_t**)xcalloc(n_in + n_out, sizeof(int64_t*));
  for (i = 0; i < n_in; ++i) {
    size_t rank = 0, n = 1;
    opfuse_tensor* t = &inputs[i];
    opfuse_session_input_dims(session, i, NULL, 0, &rank);
    dims[i] = (int64_t*)xcalloc(rank, sizeof(int64_t));
    opfuse_session_input_dims(session, i, dims[i], rank, &rank);
    if (i == 0 && input_path && file_tensor.rank > 0) { /* the .pb file's own dims */
      free(dims[0]);
      dims[0] = (int64_t*)xcalloc(file_tensor.rank, sizeof(int64_t));
      memcpy(dims[0], file_tensor.dims, file_tensor.rank * sizeof(int64_t));
      rank = file_tensor.rank;
    }
    for (k = 0; k < rank; ++k) {
      if (dims[i][k] < 0) dims[i][k] = 1;
      n *= (size_t)dims[i][k];
    }
    t->struct_size = sizeof(opfuse_tensor);
    t->name = opfuse_session_input_name(session, i);
    opfuse_session_input_dtype(session, i, &t->dtype);
    t->rank = rank;
    t->dims = dims[i];
    t->byte_size = n * opfuse_dtype_size(t->dtype);
    t->data = xcalloc(n, opfuse_dtype_size(t->dtype));
    if (i == 0 && t->dtype == OPFUSE_DTYPE_F32) {
      if (!input_path) {
        generate((float*)t->data, n, 42);
      } else if (file_tensor.count != n) {
        fprintf(stderr, "classify_c: error: '%s' holds %zu floats, input '%s' takes %zu\n", input_path,
                file_tensor.count, t->name, n);
        goto free_buffers;
      } else {
        memcpy(t->data, file_tensor.data, n * sizeof(float));
      }
    }
  }
  printf("input: %s\n", input_path ? input_path : "generated (deterministic)");

  /* The outputs: the session says their dims for these inputs. */
  for (i = 0; i < n_out; ++i) {
    size_t rank = 0, n = 1;
    opfuse_tensor* t = &outputs[i];
    if (opfuse_session_resolve_output_dims(session, inputs, n_in, i, NULL, 0, &rank) != OPFUSE_OK) {
      fail("binding the input dims");
      goto free_buffers;
    }
    dims[n_in + i] = (int64_t*)xcalloc(rank, sizeof(int64_t));
    opfuse_session_resolve_output_dims(session, inputs, n_in, i, dims[n_in + i], rank, &rank);
    for (k = 0; k < rank; ++k) n *= (size_t)dims[n_in + i][k];
    t->struct_size = sizeof(opfuse_tensor);
    t->name = opfuse_session_output_name(session, i);
    opfuse_session_output_dtype(session, i, &t->dtype);
    t->rank = rank;
    t->dims = dims[n_in + i];
    t->byte_size = n * opfuse_dtype_size(t->dtype);
    t->data = xcalloc(n, opfuse_dtype_size(t->dtype));
  }

  if (opfuse_session_run(session, inputs, n_in, outputs, n_out) != OPFUSE_OK) {
    fail("running the model");
    goto free_buffers;
  }
  if (outputs[0].dtype == OPFUSE_DTYPE_F32)
    print_top5(outputs[0].name, (const float*)outputs[0].data, outputs[0].byte_size / sizeof(float));
  else
    printf("output '%s' is %s, not scores\n", outputs[0].name, opfuse_dtype_name(outputs[0].dtype));
  rc = 0;

free_buffers:
  for (i = 0; i < n_in; ++i) free(inputs[i].data);
  for (i = 0; i < n_out; ++i) free(outputs[i].data);
  for (i = 0; i < n_in + n_out; ++i) free(dims[i]);
  free(dims);
  free(inputs);
  free(outputs);
done:
  free(file_tensor.data);
  opfuse_session_destroy(session);
  return rc;
}
