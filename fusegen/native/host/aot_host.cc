// aot_host.cc -- fusegen's host side of the MindSpore AOT kernel ABI.
//
// Python cannot implement a C++ abstract class, so this small library does it
// for fusegen.aot_kernel: it implements AotExtra over attribute values set from
// Python, and exports a C API (loaded through ctypes) that creates extras and
// calls a kernel's functions through their real C++ function-pointer types.
//
// Two copies get built, one per libstdc++ string ABI (-D_GLIBCXX_USE_CXX11_ABI=0
// and =1), because AotExtra's virtual getters take and return std::string by
// value: a kernel must be hosted by the copy whose std::string it was compiled
// with, or Attr<> reads garbage and usually crashes.
//
// Every call into kernel code is wrapped in try/catch.  A C++ exception must not
// unwind into ctypes (that aborts the process); it becomes status 1 and a message.
//
// Status convention of the fg_call_* functions: 0 = the kernel function returned
// (its own int result, if any, is stored separately), 1 = it threw (message in
// the error buffer), 2 = an output buffer was too small (sizes needed reported).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "custom_aot_extra.h"

// Everything is hidden except the C API, so the two ABI copies (and the
// kernels, which carry their own inline AotExtra) never interpose on each other.
#define FG_API extern "C" __attribute__((visibility("default")))

namespace {

enum class Kind { kBool, kInt, kFloat, kStr, kIntVec, kFloatVec, kInt2D, kFloat2D, kEmptyList };

const char *KindName(Kind kind) {
  switch (kind) {
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int64_t";
    case Kind::kFloat: return "float";
    case Kind::kStr: return "std::string";
    case Kind::kIntVec: return "std::vector<int64_t>";
    case Kind::kFloatVec: return "std::vector<float>";
    case Kind::kInt2D: return "std::vector<std::vector<int64_t>>";
    case Kind::kFloat2D: return "std::vector<std::vector<float>>";
    case Kind::kEmptyList: return "empty list";
  }
  return "?";
}

bool IsList(Kind kind) { return kind >= Kind::kIntVec; }

struct Value {
  Kind kind = Kind::kBool;
  bool b = false;
  int64_t i = 0;
  float f = 0.0f;
  std::string s;
  std::vector<int64_t> iv;
  std::vector<float> fv;
  std::vector<std::vector<int64_t>> i2;
  std::vector<std::vector<float>> f2;
};

class HostExtra final : public AotExtra {
 public:
  bool HasAttr(std::string name) override { return attrs_.count(name) != 0; }

  void Set(const char *name, Value value) { attrs_[name] = std::move(value); }

 private:
  // A missing attribute or a type mismatch throws, naming both the attribute
  // and what the kernel asked for: returning a default would let the kernel
  // run with a wrong value, which is worse than an error.  An empty Python
  // list has no element type, so it reads as an empty vector of any kind.
  const Value &Get(const std::string &name, Kind want) const {
    auto it = attrs_.find(name);
    if (it == attrs_.end()) {
      std::string given;
      for (const auto &entry : attrs_) {
        given += given.empty() ? entry.first : ", " + entry.first;
      }
      throw std::out_of_range("attribute '" + name + "' was not given (the kernel asked for Attr<" +
                              KindName(want) + ">); attributes given: " + (given.empty() ? "none" : given));
    }
    Kind have = it->second.kind;
    if (have != want && !(have == Kind::kEmptyList && IsList(want))) {
      throw std::runtime_error("attribute '" + name + "' holds a " + KindName(have) +
                               ", but the kernel asked for Attr<" + KindName(want) + ">");
    }
    return it->second;
  }

  bool GetAttrBool(std::string name) override { return Get(name, Kind::kBool).b; }
  int64_t GetAttrInt(std::string name) override { return Get(name, Kind::kInt).i; }
  float GetAttrFloat(std::string name) override { return Get(name, Kind::kFloat).f; }
  std::string GetAttrStr(std::string name) override { return Get(name, Kind::kStr).s; }
  std::vector<int64_t> GetAttrIntVec(std::string name) override { return Get(name, Kind::kIntVec).iv; }
  std::vector<float> GetAttrFloatVec(std::string name) override { return Get(name, Kind::kFloatVec).fv; }
  std::vector<std::vector<int64_t>> GetAttrInt2DVec(std::string name) override {
    return Get(name, Kind::kInt2D).i2;
  }
  std::vector<std::vector<float>> GetAttrFloat2DVec(std::string name) override {
    return Get(name, Kind::kFloat2D).f2;
  }

  std::map<std::string, Value> attrs_;
};

HostExtra *AsHost(void *extra) { return static_cast<HostExtra *>(static_cast<AotExtra *>(extra)); }

void CopyMessage(const char *message, char *buffer, size_t size) {
  if (buffer != nullptr && size > 0) {
    std::snprintf(buffer, size, "%s", message);
  }
}

// Runs `body`, turning any C++ exception into status 1 plus a message.
template <typename Body>
int Guarded(char *error, size_t error_size, Body body) {
  try {
    return body();
  } catch (const std::exception &exc) {
    CopyMessage(exc.what(), error, error_size);
  } catch (...) {
    CopyMessage("unknown C++ exception (not derived from std::exception)", error, error_size);
  }
  return 1;
}

template <typename T>
int SetAttr(void *extra, const char *name, Kind kind, T Value::*field, T value) {
  return Guarded(nullptr, 0, [&] {
    Value v;
    v.kind = kind;
    v.*field = std::move(value);
    AsHost(extra)->Set(name, std::move(v));
    return 0;
  });
}

// Rebuilds a ragged 2-D list from flat data plus row lengths (ctypes can only
// pass flat arrays).
template <typename T>
std::vector<std::vector<T>> Rows(const T *data, const size_t *row_lengths, size_t rows) {
  std::vector<std::vector<T>> out(rows);
  for (size_t r = 0; r < rows; ++r) {
    out[r].assign(data, data + row_lengths[r]);
    data += row_lengths[r];
  }
  return out;
}

// The kernel-side function types of the ABI.
using InitFn = int (*)(int *, int64_t **, const char **, AotExtra *);
using MainFn = int (*)(int, void **, int *, int64_t **, const char **, void *, void *);
using InferShapeFn = std::vector<int64_t> (*)(int *, int64_t **, AotExtra *);
using InferShapesFn = std::vector<std::vector<int64_t>> (*)(int *, int64_t **, AotExtra *);
using InferTypeFn = TypeId (*)(std::vector<TypeId>, AotExtra *);
using InferTypesFn = std::vector<TypeId> (*)(std::vector<TypeId>, AotExtra *);

}  // namespace

// The argument block of one main-function call.  Python keeps one per input
// signature and rewrites only the data pointers in `params`, so a call crosses
// ctypes with a single pointer argument.
struct FgCall {
  void *fn;
  int nparam;
  void **params;
  int *ndims;
  int64_t **shapes;
  const char **dtypes;
  void *stream;
  void *extra;
  int result;
  char error[512];
};

FG_API int fg_abi() { return _GLIBCXX_USE_CXX11_ABI; }

FG_API void *fg_extra_new() {
  try {
    return static_cast<AotExtra *>(new HostExtra);
  } catch (...) {
    return nullptr;
  }
}

// Frees the extra only; call fg_extra_destruct_kernel_data first, while the
// kernel's library (which holds the kernel data's destructor) is still loaded.
FG_API void fg_extra_free(void *extra) { delete static_cast<AotExtra *>(extra); }

FG_API int fg_extra_set_bool(void *extra, const char *name, int value) {
  return SetAttr<bool>(extra, name, Kind::kBool, &Value::b, value != 0);
}

FG_API int fg_extra_set_int(void *extra, const char *name, int64_t value) {
  return SetAttr<int64_t>(extra, name, Kind::kInt, &Value::i, value);
}

FG_API int fg_extra_set_float(void *extra, const char *name, float value) {
  return SetAttr<float>(extra, name, Kind::kFloat, &Value::f, value);
}

FG_API int fg_extra_set_str(void *extra, const char *name, const char *data, size_t length) {
  return SetAttr<std::string>(extra, name, Kind::kStr, &Value::s, std::string(data, length));
}

FG_API int fg_extra_set_int_vec(void *extra, const char *name, const int64_t *data, size_t n) {
  return SetAttr<std::vector<int64_t>>(extra, name, Kind::kIntVec, &Value::iv, {data, data + n});
}

FG_API int fg_extra_set_float_vec(void *extra, const char *name, const float *data, size_t n) {
  return SetAttr<std::vector<float>>(extra, name, Kind::kFloatVec, &Value::fv, {data, data + n});
}

FG_API int fg_extra_set_int_2d(void *extra, const char *name, const int64_t *data, const size_t *row_lengths,
                               size_t rows) {
  return SetAttr(extra, name, Kind::kInt2D, &Value::i2, Rows(data, row_lengths, rows));
}

FG_API int fg_extra_set_float_2d(void *extra, const char *name, const float *data, const size_t *row_lengths,
                                 size_t rows) {
  return SetAttr(extra, name, Kind::kFloat2D, &Value::f2, Rows(data, row_lengths, rows));
}

FG_API int fg_extra_set_empty_list(void *extra, const char *name) {
  return SetAttr<bool>(extra, name, Kind::kEmptyList, &Value::b, false);
}

// Copies up to `capacity` workspace sizes (bytes) set by Init; returns how many there are.
FG_API size_t fg_extra_workspace(void *extra, size_t *sizes, size_t capacity) {
  const std::vector<size_t> &workspace = static_cast<AotExtra *>(extra)->WorkSpace();
  for (size_t i = 0; i < workspace.size() && i < capacity; ++i) {
    sizes[i] = workspace[i];
  }
  return workspace.size();
}

FG_API int fg_extra_destruct_kernel_data(void *extra, char *error, size_t error_size) {
  return Guarded(error, error_size, [&] {
    static_cast<AotExtra *>(extra)->DestructKernelData();
    return 0;
  });
}

FG_API int fg_call_main(FgCall *call) {
  return Guarded(call->error, sizeof(call->error), [&] {
    call->result = reinterpret_cast<MainFn>(call->fn)(call->nparam, call->params, call->ndims, call->shapes,
                                                       call->dtypes, call->stream, call->extra);
    return 0;
  });
}

FG_API int fg_call_init(void *fn, int *ndims, int64_t **shapes, const char **dtypes, void *extra, int *result,
                        char *error, size_t error_size) {
  return Guarded(error, error_size, [&] {
    *result = reinterpret_cast<InitFn>(fn)(ndims, shapes, dtypes, static_cast<AotExtra *>(extra));
    return 0;
  });
}

// Calls NameInferShape.  `multi` selects the return type the kernel declared
// (one shape or a vector of shapes): calling through the wrong type is
// undefined behaviour, so Python decides it from the declared output count.
// Results are flattened: ranks[k] dims of output k, concatenated in `dims`.
FG_API int fg_call_infer_shape(void *fn, int multi, int *ndims, int64_t **shapes, void *extra, int64_t *dims,
                               size_t dims_capacity, int64_t *ranks, size_t ranks_capacity, size_t *n_outputs,
                               size_t *n_dims, char *error, size_t error_size) {
  return Guarded(error, error_size, [&] {
    std::vector<std::vector<int64_t>> result;
    AotExtra *aot_extra = static_cast<AotExtra *>(extra);
    if (multi) {
      result = reinterpret_cast<InferShapesFn>(fn)(ndims, shapes, aot_extra);
    } else {
      result.push_back(reinterpret_cast<InferShapeFn>(fn)(ndims, shapes, aot_extra));
    }
    size_t total = 0;
    for (const auto &shape : result) {
      total += shape.size();
    }
    *n_outputs = result.size();
    *n_dims = total;
    if (result.size() > ranks_capacity || total > dims_capacity) {
      return 2;
    }
    for (const auto &shape : result) {
      *ranks++ = static_cast<int64_t>(shape.size());
      for (int64_t d : shape) {
        *dims++ = d;
      }
    }
    return 0;
  });
}

// Calls NameInferType: `TypeId f(std::vector<TypeId>, AotExtra *)` for one
// output, `std::vector<TypeId> f(...)` for several (`multi`).
FG_API int fg_call_infer_type(void *fn, int multi, const int *input_types, size_t n_inputs, void *extra,
                              int *output_types, size_t capacity, size_t *n_outputs, char *error,
                              size_t error_size) {
  return Guarded(error, error_size, [&] {
    std::vector<TypeId> inputs;
    for (size_t i = 0; i < n_inputs; ++i) {
      inputs.push_back(static_cast<TypeId>(input_types[i]));
    }
    AotExtra *aot_extra = static_cast<AotExtra *>(extra);
    std::vector<TypeId> result;
    if (multi) {
      result = reinterpret_cast<InferTypesFn>(fn)(inputs, aot_extra);
    } else {
      result.push_back(reinterpret_cast<InferTypeFn>(fn)(inputs, aot_extra));
    }
    *n_outputs = result.size();
    if (result.size() > capacity) {
      return 2;
    }
    for (size_t i = 0; i < result.size(); ++i) {
      output_types[i] = static_cast<int>(result[i]);
    }
    return 0;
  });
}
