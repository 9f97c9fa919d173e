/* opfuse/export.h - which declarations the shared library exports.
 *
 * libopfuse is compiled with hidden visibility: a symbol leaves the shared library only when its
 * declaration carries OPFUSE_API (the C API in opfuse.h and the documented C++ API). The list of
 * what is exported is committed (abi/exported-symbols.txt) and checked by a test, so a change to
 * the ABI shows up in review. This header is valid C and C++. */
#ifndef OPFUSE_EXPORT_H
#define OPFUSE_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define OPFUSE_API __attribute__((visibility("default")))
/* The private implementation classes nested in exported ones (Model::Impl, Plan::Impl). */
#define OPFUSE_LOCAL __attribute__((visibility("hidden")))
#else
#define OPFUSE_API
#define OPFUSE_LOCAL
#endif

#endif /* OPFUSE_EXPORT_H */
