/**
 * @file opfuse.h
 * @brief The stable C API of opfuse: load an ONNX model, compile it into a session, run it on
 * caller-owned buffers.
 *
 * A minimal program (error handling shortened):
 * @code
 *   opfuse_model* model = NULL;
 *   opfuse_session* session = NULL;
 *   opfuse_session_options opt;
 *   opfuse_session_options_init(&opt, sizeof opt);
 *   opt.threads = 1;
 *   if (opfuse_model_load_builtin("mobilenet_v2", &model) != OPFUSE_OK ||
 *       opfuse_session_create(model, &opt, &session) != OPFUSE_OK) {
 *     fprintf(stderr, "%s\n", opfuse_last_error());
 *     return 1;
 *   }
 *   static float x[1 * 3 * 224 * 224], y[1 * 1000];
 *   const int64_t x_dims[] = {1, 3, 224, 224}, y_dims[] = {1, 1000};
 *   opfuse_tensor in = {sizeof(opfuse_tensor), "input", OPFUSE_DTYPE_F32, 4, x_dims, x, sizeof x};
 *   opfuse_tensor out = {sizeof(opfuse_tensor), "output", OPFUSE_DTYPE_F32, 2, y_dims, y, sizeof y};
 *   opfuse_status s = opfuse_session_run(session, &in, 1, &out, 1);
 *   opfuse_session_destroy(session);
 *   opfuse_model_destroy(model);
 * @endcode
 *
 * @par Handles and ownership
 * The library's objects are opaque handles (::opfuse_model, ::opfuse_session) that the caller
 * creates with a `_load_` or `_create` function and releases with the matching `_destroy`
 * function; destroying NULL does nothing. A session keeps what it needs of its model, so the
 * model may be destroyed while sessions made from it live on. Tensor data is always owned by
 * the caller: the library reads input buffers and writes output buffers during
 * opfuse_session_run() and keeps no pointer to them afterwards. Strings returned by the query
 * functions belong to the session and stay valid until it is destroyed.
 *
 * @par Errors
 * Every function that can fail returns an ::opfuse_status (::OPFUSE_OK is 0). The query
 * functions that return a count or a string return 0 or NULL instead, as each documents. After
 * a failure, opfuse_last_error() gives a message that names the function, the parameter or
 * tensor at fault and the offending value, e.g.
 * `opfuse_session_run: input 'input' byte_size is 4, expected 602112 (dims 1x3x224x224, f32)`.
 * A NULL handle or out-pointer is reported as ::OPFUSE_INVALID_ARGUMENT, never a crash; on
 * failure an out-pointer is set to NULL (when it is not itself NULL) and output buffers are left
 * untouched. No C++ exception ever leaves the library; an allocation failure inside it is
 * ::OPFUSE_OUT_OF_MEMORY.
 *
 * @par Thread safety
 * The library has no global mutable state apart from per-thread data (the error message and
 * the scratch a run reuses). Loading models, creating sessions and destroying independent
 * handles are safe from any thread at the same time. One model may be shared by sessions
 * created and run on different threads. One session may also be shared: opfuse_session_run()
 * and opfuse_session_resolve_output_dims() may be called on it from several threads at once,
 * and concurrent runs proceed in parallel, each in an activation arena and kernel workspace of
 * its own (the session keeps a pool of them that grows to the most runs seen at once; each
 * counts against the memory budget, and a run that would exceed it waits for another run to
 * finish instead). The other session queries only read what never changes after creation.
 * Every function may be called on a session from any thread as long as no thread destroys the
 * session meanwhile.
 *
 * @par ABI stability
 * Handles are opaque, functions take and return only C types, and the two structs that cross
 * the API (::opfuse_session_options and ::opfuse_tensor) begin with a `struct_size` field that
 * the caller sets to `sizeof` of the struct as compiled. Later versions only append fields
 * (laid out so that the struct has no tail padding, so every version has a distinct size): the
 * library reads the fields that fit in `struct_size` and uses defaults for the rest, refuses a
 * `struct_size` smaller than the first version's, and refuses a larger struct whose bytes past
 * the fields it knows are not zero (a newer caller asking for something this library cannot
 * do). Enum values never change meaning.
 */
#ifndef OPFUSE_OPFUSE_H
#define OPFUSE_OPFUSE_H

#include <stddef.h>
#include <stdint.h>

#include "opfuse/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Major version of this header (semantic versioning: a change breaks the API or ABI). */
#define OPFUSE_VERSION_MAJOR 0
/** @brief Minor version of this header (additions that keep the ABI). */
#define OPFUSE_VERSION_MINOR 1
/** @brief Patch version of this header (fixes only). */
#define OPFUSE_VERSION_PATCH 0
/** @brief The version of this header as a string, "MAJOR.MINOR.PATCH". */
#define OPFUSE_VERSION_STRING "0.1.0"

/** @brief Result codes; the values equal those of the C++ `opfuse::StatusCode`. */
typedef enum opfuse_status {
  OPFUSE_OK = 0,               /**< Success. */
  OPFUSE_INVALID_ARGUMENT = 1, /**< A bad argument: NULL handle, bad file, wrong shape, size or dtype. */
  OPFUSE_UNSUPPORTED = 2,      /**< A valid request this build cannot serve (an op, attribute or option). */
  OPFUSE_OUT_OF_MEMORY = 3,    /**< An allocation failed or the session's memory budget would be exceeded. */
  OPFUSE_INTERNAL = 4          /**< A bug in opfuse; please report it with the message. */
} opfuse_status;

/** @brief Optimization stages: the highest stage a session may use (lower ones serve the rest). */
typedef enum opfuse_stage {
  OPFUSE_STAGE_NAIVE = 0, /**< The readable scalar reference kernels. */
  OPFUSE_STAGE_SIMD = 1,  /**< Vectorized, multi-threaded kernels. */
  OPFUSE_STAGE_FUSED = 2  /**< SIMD kernels that also run fused post-ops before storing (the default). */
} opfuse_stage;

/** @brief Graph fusion levels; each includes the ones before (`opfuse fusions` lists them). */
typedef enum opfuse_fusion {
  OPFUSE_FUSION_NONE = 0,     /**< Run the graph as imported. */
  OPFUSE_FUSION_BASIC = 1,    /**< Batch norm folding, activations into conv/gemm, MatMul + bias. */
  OPFUSE_FUSION_ADVANCED = 2, /**< Residual adds, GELU, LayerNorm, elementwise chains. */
  OPFUSE_FUSION_FULL = 3      /**< Attention and MobileNetV2 blocks as single kernels (the default). */
} opfuse_fusion;

/** @brief Element types of model inputs and outputs. */
typedef enum opfuse_dtype {
  OPFUSE_DTYPE_F32 = 0, /**< 32-bit IEEE float. */
  OPFUSE_DTYPE_I64 = 1, /**< 64-bit signed integer (shapes, indices). */
  OPFUSE_DTYPE_BOOL = 2 /**< Boolean, one byte per element holding 0 or 1. */
} opfuse_dtype;

/** @brief A loaded model: its graph and weights. Opaque; see opfuse_model_load_file(). */
typedef struct opfuse_model opfuse_model;

/** @brief A model compiled with a set of options, ready to run. Opaque; see opfuse_session_create(). */
typedef struct opfuse_session opfuse_session;

/**
 * @brief Options of opfuse_session_create(). Fill it with opfuse_session_options_init(), then
 * change the fields you need.
 */
typedef struct opfuse_session_options {
  /** `sizeof(opfuse_session_options)` as the caller compiled it (opfuse_session_options_init() sets it). */
  size_t struct_size;
  /** The highest ::opfuse_stage to use; default ::OPFUSE_STAGE_FUSED. */
  int32_t stage;
  /** The ::opfuse_fusion level; default ::OPFUSE_FUSION_FULL. */
  int32_t fusion;
  /** Worker threads for the kernels that use them; 0 (the default) means all cores. */
  int32_t threads;
  /** How many input shapes the session keeps compiled (least recently used dropped first); default 8. */
  int32_t max_cached_shapes;
  /** Bytes that the weights plus working memory of one input shape may take; default 16 GiB; 0 is refused. */
  uint64_t memory_budget;
} opfuse_session_options;

/**
 * @brief A caller-owned tensor: dense, row-major, dims in the declared order.
 *
 * Used for the inputs and outputs of opfuse_session_run() (and the inputs of
 * opfuse_session_resolve_output_dims()). The library only reads input data and only writes
 * output data; it keeps no pointer into the struct after the call returns.
 */
typedef struct opfuse_tensor {
  /** `sizeof(opfuse_tensor)` as the caller compiled it; all tensors of one array must agree. */
  size_t struct_size;
  /** The model input or output this binds; NULL or "" binds by position in the array. */
  const char* name;
  /** The element type; must be the one the model declares. */
  opfuse_dtype dtype;
  /** The number of dims. */
  size_t rank;
  /** `rank` dims, each >= 0; may be NULL when rank is 0. */
  const int64_t* dims;
  /** The elements (read for inputs, written for outputs); may be NULL when there are none. */
  void* data;
  /** Size of `data` in bytes: must equal the product of the dims times the element size. */
  size_t byte_size;
} opfuse_tensor;

/**
 * @brief The library's version, "MAJOR.MINOR.PATCH" (the CMake project version it was built as).
 * @return A static string; compare it with ::OPFUSE_VERSION_STRING to detect a header/library mismatch.
 * Thread-safe.
 */
OPFUSE_API const char* opfuse_version(void);

/**
 * @brief The message of the last failed call on the calling thread.
 * @return A string naming the function, the parameter or tensor and the offending value; "" if
 * no call on this thread has failed. Successful calls leave it unchanged. Owned by the library
 * and valid until the next opfuse call on this thread. Never NULL. Thread-safe (per thread).
 */
OPFUSE_API const char* opfuse_last_error(void);

/**
 * @brief The name of a status code.
 * @param status A status code.
 * @return "ok", "invalid_argument", "unsupported", "out_of_memory", "internal", or "unknown" for
 * any other value. A static string. Thread-safe.
 */
OPFUSE_API const char* opfuse_status_name(opfuse_status status);

/**
 * @brief The size in bytes of one element of a dtype.
 * @param dtype An element type.
 * @return 4 for ::OPFUSE_DTYPE_F32, 8 for ::OPFUSE_DTYPE_I64, 1 for ::OPFUSE_DTYPE_BOOL, 0 for an
 * unknown value. Thread-safe.
 */
OPFUSE_API size_t opfuse_dtype_size(opfuse_dtype dtype);

/**
 * @brief The name of a dtype.
 * @param dtype An element type.
 * @return "f32", "i64", "bool", or "unknown". A static string. Thread-safe.
 */
OPFUSE_API const char* opfuse_dtype_name(opfuse_dtype dtype);

/**
 * @brief How many built-in models there are (models the library writes itself, with
 * deterministic pseudo-random weights: "resnet50", "mobilenet_v2", "bert_layer").
 * @return The count. Thread-safe.
 */
OPFUSE_API size_t opfuse_builtin_model_count(void);

/**
 * @brief The name of a built-in model, for opfuse_model_load_builtin().
 * @param index 0 to opfuse_builtin_model_count() - 1.
 * @return A static string, or NULL (with opfuse_last_error() set) when index is out of range.
 * Thread-safe.
 */
OPFUSE_API const char* opfuse_builtin_model_name(size_t index);

/**
 * @brief Loads an ONNX model file.
 * @param path Path of the .onnx file.
 * @param[out] out Receives the new model, to be released with opfuse_model_destroy(); NULL on failure.
 * @return ::OPFUSE_OK; ::OPFUSE_INVALID_ARGUMENT for a NULL argument or a file that cannot be
 * read or is not a valid model (the message names the file); ::OPFUSE_UNSUPPORTED for an op or
 * attribute opfuse does not handle; ::OPFUSE_OUT_OF_MEMORY.
 * Thread-safe.
 */
OPFUSE_API opfuse_status opfuse_model_load_file(const char* path, opfuse_model** out);

/**
 * @brief Loads an ONNX model from a serialized ModelProto in memory.
 * @param data The bytes; only read during the call.
 * @param size Number of bytes.
 * @param[out] out Receives the new model, to be released with opfuse_model_destroy(); NULL on failure.
 * @return ::OPFUSE_OK; ::OPFUSE_INVALID_ARGUMENT for a NULL argument or bytes that are not a
 * valid model; ::OPFUSE_UNSUPPORTED; ::OPFUSE_OUT_OF_MEMORY. Thread-safe.
 */
OPFUSE_API opfuse_status opfuse_model_load_memory(const void* data, size_t size, opfuse_model** out);

/**
 * @brief Loads a built-in model by name (see opfuse_builtin_model_name()).
 * @param name "resnet50", "mobilenet_v2" or "bert_layer".
 * @param[out] out Receives the new model, to be released with opfuse_model_destroy(); NULL on failure.
 * @return ::OPFUSE_OK; ::OPFUSE_INVALID_ARGUMENT for a NULL argument or an unknown name (the
 * message lists the known ones); ::OPFUSE_OUT_OF_MEMORY. Thread-safe.
 */
OPFUSE_API opfuse_status opfuse_model_load_builtin(const char* name, opfuse_model** out);

/**
 * @brief Releases a model. Sessions created from it stay usable.
 * @param model The model, or NULL (then nothing happens).
 * Thread-safe for distinct models; the model must not be in use by another thread's call.
 */
OPFUSE_API void opfuse_model_destroy(opfuse_model* model);

/**
 * @brief Fills options with the defaults and sets its struct_size.
 * @param[out] options The struct to fill.
 * @param struct_size `sizeof *options` as the caller compiled it: the library writes only the
 * fields that fit.
 * @return ::OPFUSE_OK; ::OPFUSE_INVALID_ARGUMENT for NULL options or a struct_size smaller than
 * the first version of the struct. Thread-safe.
 */
OPFUSE_API opfuse_status opfuse_session_options_init(opfuse_session_options* options, size_t struct_size);

/**
 * @brief Compiles a model into a session: binds the stage, fusion level, threads and memory
 * budget. A model whose inputs all have static dims is fully planned here (kernels chosen,
 * weights packed), so that errors show now; one with symbolic dims is planned on the first run
 * (or opfuse_session_resolve_output_dims()) for each set of input dims.
 * @param model The model; only read, and not needed by the session afterwards.
 * @param options The options, or NULL for the defaults.
 * @param[out] out Receives the new session, to be released with opfuse_session_destroy(); NULL on failure.
 * @return ::OPFUSE_OK; ::OPFUSE_INVALID_ARGUMENT for a NULL handle or out-pointer, a bad
 * struct_size or an option out of range (the message names the field and its value);
 * ::OPFUSE_UNSUPPORTED for an op no kernel handles, or options fields this library does not
 * know; ::OPFUSE_OUT_OF_MEMORY past the memory budget.
 * Thread-safe: sessions may be created from one model on several threads at once.
 */
OPFUSE_API opfuse_status opfuse_session_create(const opfuse_model* model, const opfuse_session_options* options,
                                               opfuse_session** out);

/**
 * @brief Releases a session and all memory it holds.
 * @param session The session, or NULL (then nothing happens).
 * Must not race with any other call on the same session.
 */
OPFUSE_API void opfuse_session_destroy(opfuse_session* session);

/**
 * @brief The number of model inputs.
 * @param session The session.
 * @return The count, or 0 (with opfuse_last_error() set) for a NULL session. Thread-safe.
 */
OPFUSE_API size_t opfuse_session_input_count(const opfuse_session* session);

/**
 * @brief The number of model outputs.
 * @param session The session.
 * @return The count, or 0 (with opfuse_last_error() set) for a NULL session. Thread-safe.
 */
OPFUSE_API size_t opfuse_session_output_count(const opfuse_session* session);

/**
 * @brief The name of a model input.
 * @param session The session.
 * @param index 0 to opfuse_session_input_count() - 1.
 * @return The name, owned by the session; NULL (with opfuse_last_error() set) for a NULL
 * session or an index out of range. Thread-safe.
 */
OPFUSE_API const char* opfuse_session_input_name(const opfuse_session* session, size_t index);

/**
 * @brief The name of a model output.
 * @param session The session.
 * @param index 0 to opfuse_session_output_count() - 1.
 * @return The name, owned by the session; NULL (with opfuse_last_error() set) for a NULL
 * session or an index out of range. Thread-safe.
 */
OPFUSE_API const char* opfuse_session_output_name(const opfuse_session* session, size_t index);

/**
 * @brief The element type of a model input.
 * @param session The session.
 * @param index 0 to opfuse_session_input_count() - 1.
 * @param[out] dtype Receives the type.
 * @return ::OPFUSE_OK; ::OPFUSE_INVALID_ARGUMENT for a NULL argument or an index out of range.
 * Thread-safe.
 */
OPFUSE_API opfuse_status opfuse_session_input_dtype(const opfuse_session* session, size_t index, opfuse_dtype* dtype);

/**
 * @brief The element type of a model output.
 * @param session The session.
 * @param index 0 to opfuse_session_output_count() - 1.
 * @param[out] dtype Receives the type.
 * @return ::OPFUSE_OK; ::OPFUSE_INVALID_ARGUMENT for a NULL argument or an index out of range.
 * Thread-safe.
 */
OPFUSE_API opfuse_status opfuse_session_output_dtype(const opfuse_session* session, size_t index, opfuse_dtype* dtype);

/**
 * @brief The dims of a model input as the model declares them: -1 for a symbolic dim (see
 * opfuse_session_input_dim_symbol()).
 * @param session The session.
 * @param index 0 to opfuse_session_input_count() - 1.
 * @param[out] dims Receives the dims; may be NULL when capacity is 0 (to ask for the rank only).
 * @param capacity The number of elements dims has room for.
 * @param[out] rank Receives the rank (also when capacity is too small).
 * @return ::OPFUSE_OK; ::OPFUSE_INVALID_ARGUMENT for a NULL argument, an index out of range, or
 * a capacity other than 0 below the rank. Thread-safe.
 */
OPFUSE_API opfuse_status opfuse_session_input_dims(const opfuse_session* session, size_t index, int64_t* dims,
                                                   size_t capacity, size_t* rank);

/**
 * @brief The dims of a model output as the model declares them: -1 for a symbolic or unknown
 * dim. The dims for given input dims come from opfuse_session_resolve_output_dims().
 * @param session The session.
 * @param index 0 to opfuse_session_output_count() - 1.
 * @param[out] dims Receives the dims; may be NULL when capacity is 0 (to ask for the rank only).
 * @param capacity The number of elements dims has room for.
 * @param[out] rank Receives the declared rank (also when capacity is too small).
 * @return ::OPFUSE_OK; ::OPFUSE_INVALID_ARGUMENT for a NULL argument, an index out of range, or
 * a capacity other than 0 below the rank. Thread-safe.
 */
OPFUSE_API opfuse_status opfuse_session_output_dims(const opfuse_session* session, size_t index, int64_t* dims,
                                                    size_t capacity, size_t* rank);

/**
 * @brief The symbol of one dim of a model input ("batch", "seq").
 * @param session The session.
 * @param index 0 to opfuse_session_input_count() - 1.
 * @param dim 0 to the input's rank - 1.
 * @return The symbol, owned by the session: "" for a static dim or one the file left unnamed;
 * NULL (with opfuse_last_error() set) for a NULL session or an index out of range. Thread-safe.
 */
OPFUSE_API const char* opfuse_session_input_dim_symbol(const opfuse_session* session, size_t index, size_t dim);

/**
 * @brief The symbol of one dim of a model output.
 * @param session The session.
 * @param index 0 to opfuse_session_output_count() - 1.
 * @param dim 0 to the output's declared rank - 1.
 * @return The symbol, owned by the session: "" for a static dim or one the file left unnamed;
 * NULL (with opfuse_last_error() set) for a NULL session or an index out of range. Thread-safe.
 */
OPFUSE_API const char* opfuse_session_output_dim_symbol(const opfuse_session* session, size_t index, size_t dim);

/**
 * @brief The dims one output will have for these inputs: binds the symbolic dims and plans the
 * session for them (so a following opfuse_session_run() with the same dims starts at once).
 * @param session The session.
 * @param inputs One tensor per model input, as for opfuse_session_run(); `data` may be NULL
 * (only inputs whose values decide shapes need it) and is then not checked against byte_size.
 * @param n_inputs The number of tensors in inputs.
 * @param output_index 0 to opfuse_session_output_count() - 1.
 * @param[out] dims Receives the dims; may be NULL when capacity is 0 (to ask for the rank only).
 * @param capacity The number of elements dims has room for.
 * @param[out] rank Receives the rank (also when capacity is too small).
 * @return ::OPFUSE_OK; ::OPFUSE_INVALID_ARGUMENT for a NULL argument, inputs that do not fit the
 * model (the message names the input, the dim and both values) or a capacity other than 0
 * below the rank; ::OPFUSE_UNSUPPORTED; ::OPFUSE_OUT_OF_MEMORY past the memory budget.
 * Thread-safe, also on one session from several threads at once (see the file's notes).
 */
OPFUSE_API opfuse_status opfuse_session_resolve_output_dims(opfuse_session* session, const opfuse_tensor* inputs,
                                                            size_t n_inputs, size_t output_index, int64_t* dims,
                                                            size_t capacity, size_t* rank);

/**
 * @brief Runs one inference with caller-owned buffers.
 *
 * Each tensor binds a model input or output by name, or by its position in the array when its
 * name is NULL or "". Every input must be given once; every output needs a buffer whose dims
 * are those opfuse_session_resolve_output_dims() reports. All arguments are checked before
 * anything runs, so on error the output buffers are left untouched. Once a set of input dims
 * has been planned, a run with the same dims allocates nothing.
 * @param session The session.
 * @param inputs One tensor per model input.
 * @param n_inputs The number of tensors in inputs (the model's input count).
 * @param outputs One tensor per model output, its data the buffer to fill.
 * @param n_outputs The number of tensors in outputs (the model's output count).
 * @return ::OPFUSE_OK; ::OPFUSE_INVALID_ARGUMENT for a NULL argument, an unknown name, a wrong
 * count, dtype, shape, byte_size or struct_size (the message names the tensor, the expected and
 * the given value); ::OPFUSE_UNSUPPORTED for nonzero fields of a later opfuse_tensor this
 * library does not know, or an op no kernel handles at these dims; ::OPFUSE_OUT_OF_MEMORY past
 * the memory budget.
 * Thread-safe: runs on one session from several threads at once proceed in parallel, each in
 * its own arena (see the file's notes).
 */
OPFUSE_API opfuse_status opfuse_session_run(opfuse_session* session, const opfuse_tensor* inputs, size_t n_inputs,
                                            opfuse_tensor* outputs, size_t n_outputs);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OPFUSE_OPFUSE_H */
