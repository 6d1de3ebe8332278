// The AOT backend's small-call path (fusegen.native.fastcall): one CPython call that checks the
// inputs, allocates the outputs (or checks the caller's, `out=`), writes the data pointers into a
// prepared argument block and calls the kernel through the host shim's fg_call_main, in place of
// np.empty calls, a Python loop over ctypes objects and a ctypes call (most of a small call's
// cost: ~4 us of a 6 us call at (4, 5)).
//
// It runs only what it can run exactly as the Python path would; anything else returns False
// with nothing done, and the caller takes that path (which copies, checks and reports): an input
// that is not a C-contiguous ndarray, a closed kernel, an evicted signature. A small call holds
// the GIL from those checks to the kernel's return, so no other thread can close the kernel,
// evict the signature or use the block in between. A large one (prepared with `enter` and
// `leave`) releases it while the kernel runs, as the ctypes path does: `enter` counts the call
// running under the kernel's lock (close() and eviction wait for it), the block is marked in use
// (another thread's call meanwhile takes the ctypes path, with blocks of its own), and `leave`
// ends the call. The ctypes path's Python cost ~4 us per call from 64 KiB on.
//
// The Numba backend's runners use `fresh` (below): the same input checks and output allocation,
// without a kernel call (theirs is a Numba entry point, called from Python).
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <vector>
#ifdef __linux__
#include <sys/mman.h>
#endif

namespace {

// Mirror of FgCall in aot_host.cc (and fusegen.native.host.FgCall).
struct FgCall {
  void *fn;
  int nparam;
  void **params;
  void *ndims, *shapes, *dtypes, *stream, *extra;
  int result;
  char error[512];
};
using CallMain = int (*)(FgCall *);

struct Output {
  std::vector<npy_intp> dims;
  PyArray_Descr *descr;
};

// Reads [(shape, dtype), ...] into `outputs`; false with a Python error set on bad input.
bool parse_outputs(PyObject *list, std::vector<Output> *outputs) {
  for (Py_ssize_t k = 0; k < PyList_GET_SIZE(list); ++k) {
    PyObject *shape, *dtype;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(list, k), "OO", &shape, &dtype)) return false;
    Output o{{}, nullptr};
    if (!PyArray_DescrConverter(dtype, &o.descr)) return false;
    outputs->push_back(o);
    PyObject *seq = PySequence_Fast(shape, "an output shape must be a sequence");
    if (seq == nullptr) return false;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); ++i)
      outputs->back().dims.push_back(PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i)));
    Py_DECREF(seq);
    if (PyErr_Occurred()) return false;
  }
  return true;
}

void release_outputs(std::vector<Output> *outputs) {
  for (Output &o : *outputs) Py_XDECREF(o.descr);
}

// Outputs of at least this many bytes get 64-byte aligned data (a cache line, one AVX-512
// vector): NumPy's allocator aligns to 16, and a kernel's vector stores into an array 16 or 48
// bytes past a line each touch two lines (silu 4096^2 float32: 7.1 ms aligned, 8.7-9.6 ms not;
// a streamed head split 2.7 against 3.4-6.3 ms). Smaller ones keep NumPy's allocator: switching
// costs two context-variable updates (~0.2 us), and their stores are few.
constexpr size_t kAlignBytes = size_t(1) << 16;

// The allocator those arrays own their data through (NEP 49's PyDataMem_Handler, so they are
// ordinary arrays: owndata, freed by this allocator, resizable): malloc's block 64 bytes larger,
// the data at its first 64-byte boundary past a 16-byte header (the block, the data's size).
// Not posix_memalign: in a process whose heap keeps freed memory (mallopt M_MMAP_MAX=0, as
// `fusegen bench` runs), its split-off fragments beside NumPy's own blocks of the same sizes
// grew the heap on every round (an OOM at 24 GB in the bench's cross_entropy (8192, 32000));
// blocks of plain malloc are reused like NumPy's.
struct AlignedHeader {
  void *block;
  size_t size;
};

// From this size on the data's whole pages are advised onto transparent huge pages, as NumPy's
// own allocator advises its arrays (alloc.c, 4 MiB): malloc maps such a block afresh on every
// call, and the kernel's first touch of a 64 MiB output took 35-79 ms of 4 KiB page faults
// against 7.4 ms in 2 MiB pages (this host, THP "madvise"); NumPy's outputs paid the latter and
// fusegen's the former. A kernel that refuses the advice changes nothing.
constexpr size_t kHugeBytes = size_t(1) << 22;

void advise_huge(char *data, size_t size) {
#ifdef MADV_HUGEPAGE
  const uintptr_t page = 4096;
  const uintptr_t first = (reinterpret_cast<uintptr_t>(data) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + size) & ~(page - 1);
  if (end > first) madvise(reinterpret_cast<void *>(first), end - first, MADV_HUGEPAGE);
#else
  (void)data, (void)size;
#endif
}

void *aligned_malloc(void *, size_t size) {
  if (size > SIZE_MAX - 64) return nullptr;
  char *block = static_cast<char *>(malloc(size + 64));
  if (block == nullptr) return nullptr;
  const uintptr_t at = (reinterpret_cast<uintptr_t>(block) + sizeof(AlignedHeader) + 63) & ~uintptr_t(63);
  auto *header = reinterpret_cast<AlignedHeader *>(at) - 1;
  header->block = block;
  header->size = size;
  if (size >= kHugeBytes) advise_huge(reinterpret_cast<char *>(at), size);
  return reinterpret_cast<void *>(at);
}
void *aligned_calloc(void *ctx, size_t nelem, size_t elsize) {
  if (elsize != 0 && nelem > SIZE_MAX / elsize) return nullptr;
  void *p = aligned_malloc(ctx, nelem * elsize);
  if (p != nullptr) memset(p, 0, nelem * elsize);
  return p;
}
void aligned_free(void *, void *ptr, size_t) {
  if (ptr != nullptr) free((static_cast<AlignedHeader *>(ptr) - 1)->block);
}
void *aligned_realloc(void *ctx, void *ptr, size_t size) {
  if (ptr == nullptr) return aligned_malloc(ctx, size);
  void *fresh = aligned_malloc(ctx, size);
  if (fresh == nullptr) return nullptr;   // (the old block stays valid, as realloc's)
  memcpy(fresh, ptr, std::min(size, (static_cast<AlignedHeader *>(ptr) - 1)->size));
  aligned_free(ctx, ptr, 0);
  return fresh;
}

PyDataMem_Handler aligned_handler = {"fusegen_aligned64", 1,
                                     {nullptr, aligned_malloc, aligned_calloc, aligned_realloc, aligned_free}};
PyObject *aligned_capsule = nullptr;   // the handler, as NumPy takes it ("mem_handler")

// PyArray_Empty, through the aligned allocator where the array is large (kAlignBytes).
PyObject *empty_array(int nd, npy_intp *dims, PyArray_Descr *descr) {
#if NPY_ABI_VERSION >= 0x02000000
  size_t nbytes = size_t(PyDataType_ELSIZE(descr));   // (NumPy 2's descriptor layout)
#else
  size_t nbytes = size_t(descr->elsize);
#endif
  for (int d = 0; d < nd; ++d) nbytes *= size_t(dims[d] > 0 ? dims[d] : 0);
  if (nbytes < kAlignBytes || aligned_capsule == nullptr) return PyArray_Empty(nd, dims, descr, 0);
  PyObject *old = PyDataMem_SetHandler(aligned_capsule);   // (a new reference to the previous one)
  if (old == nullptr) return Py_DECREF(descr), nullptr;
  PyObject *array = PyArray_Empty(nd, dims, descr, 0);
  PyObject *ours = PyDataMem_SetHandler(old);
  Py_DECREF(old);
  if (ours == nullptr) return Py_XDECREF(array), nullptr;
  Py_DECREF(ours);
  return array;
}

// Fresh (uninitialized, as np.empty's) arrays for `outputs`: one array, or a tuple of them;
// `data[k]` gets output k's data pointer when `data` is given. nullptr with an error set.
PyObject *allocate(const std::vector<Output> &outputs, void **data) {
  Py_ssize_t n_out = static_cast<Py_ssize_t>(outputs.size());
  PyObject *result = n_out == 1 ? nullptr : PyTuple_New(n_out);
  if (n_out != 1 && result == nullptr) return nullptr;
  for (Py_ssize_t k = 0; k < n_out; ++k) {
    const Output &o = outputs[k];
    Py_INCREF(o.descr);   // PyArray_Empty steals it
    PyObject *array = empty_array(static_cast<int>(o.dims.size()), const_cast<npy_intp *>(o.dims.data()), o.descr);
    if (array == nullptr) return Py_XDECREF(result), nullptr;
    if (data != nullptr) data[k] = PyArray_DATA(reinterpret_cast<PyArrayObject *>(array));
    if (n_out == 1)
      result = array;
    else
      PyTuple_SET_ITEM(result, k, array);
  }
  return result;
}

// Whether every one of `n` objects is an ndarray (exactly: a subclass may not be what it seems)
// with all of `flags` (C-contiguous; aligned too where compiled code is typed for it).
bool plain_arrays(PyObject *const *objects, Py_ssize_t n, int flags) {
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!PyArray_CheckExact(objects[i]) || !PyArray_CHKFLAGS(reinterpret_cast<PyArrayObject *>(objects[i]), flags))
      return false;
  }
  return true;
}

// What one signature's calls share (the capsule ``prepare`` returns).
struct Prepared {
  PyObject *kernel, *signature;   // for the closed / evicted checks
  CallMain main;
  FgCall *block;
  Py_ssize_t n_inputs;
  std::vector<Output> outputs;
  PyObject *enter = nullptr, *leave = nullptr;   // a large call's (GIL released): else null
  bool in_use = false;   // a call has the block (read and written with the GIL held)
};

const char *const kCapsule = "fusegen.fastcall.Prepared";
PyObject *open_name = nullptr, *evicted_name = nullptr;

void destroy(PyObject *capsule) {
  auto *p = static_cast<Prepared *>(PyCapsule_GetPointer(capsule, kCapsule));
  if (p == nullptr) return;
  Py_XDECREF(p->kernel);
  Py_XDECREF(p->signature);
  Py_XDECREF(p->enter);
  Py_XDECREF(p->leave);
  release_outputs(&p->outputs);
  delete p;
}

// prepare(kernel, signature, call_main, block, n_inputs, [(shape, dtype), ...][, enter, leave])
// -> capsule; with `enter` and `leave` (callables of no arguments), its calls release the GIL.
PyObject *prepare(PyObject *, PyObject *args) {
  PyObject *kernel, *signature, *main, *block, *outputs, *enter = Py_None, *leave = Py_None;
  Py_ssize_t n_inputs;
  if (!PyArg_ParseTuple(args, "OOOOnO!|OO", &kernel, &signature, &main, &block, &n_inputs, &PyList_Type, &outputs,
                        &enter, &leave))
    return nullptr;
  auto *p = new Prepared{kernel, signature, reinterpret_cast<CallMain>(PyLong_AsVoidPtr(main)),
                         static_cast<FgCall *>(PyLong_AsVoidPtr(block)), n_inputs, {}};
  Py_INCREF(kernel);
  Py_INCREF(signature);
  if (enter != Py_None && leave != Py_None) {
    p->enter = Py_NewRef(enter);
    p->leave = Py_NewRef(leave);
  }
  PyObject *capsule = PyCapsule_New(p, kCapsule, destroy);
  if (capsule == nullptr) {
    Py_DECREF(kernel);
    Py_DECREF(signature);
    delete p;
    return nullptr;
  }
  if (PyErr_Occurred()) return Py_DECREF(capsule), nullptr;
  if (p->main == nullptr || p->block == nullptr) {
    PyErr_SetString(PyExc_ValueError, "prepare needs the call_main and block addresses");
    return Py_DECREF(capsule), nullptr;
  }
  if (!parse_outputs(outputs, &p->outputs)) return Py_DECREF(capsule), nullptr;
  if (p->n_inputs < 0 || p->n_inputs + static_cast<Py_ssize_t>(p->outputs.size()) > p->block->nparam) {
    PyErr_SetString(PyExc_ValueError, "the argument block has fewer parameters than inputs and outputs");
    return Py_DECREF(capsule), nullptr;
  }
  return capsule;
}

bool attribute_true(PyObject *owner, PyObject *name, bool *value) {
  PyObject *v = PyObject_GetAttr(owner, name);
  if (v == nullptr) return false;
  int truth = PyObject_IsTrue(v);
  Py_DECREF(v);
  if (truth < 0) return false;
  *value = truth != 0;
  return true;
}

// Whether a call (`args`: its capsule, `skip` other arguments, then its inputs) is one this path
// runs: kRun with `*p` its prepared signature; kSkip where it is not (nothing was done: an input
// that is not a C-contiguous ndarray, a closed kernel, an evicted signature); kError with a
// Python error set.
enum class Gate { kRun, kSkip, kError };

Gate gate(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t skip, const char *usage, Prepared **p) {
  *p = nargs > skip ? static_cast<Prepared *>(PyCapsule_GetPointer(args[0], kCapsule)) : nullptr;
  if (*p == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, usage);
    return Gate::kError;
  }
  const Py_ssize_t n = (*p)->n_inputs;
  if (nargs - 1 - skip != n || !plain_arrays(args + 1 + skip, n, NPY_ARRAY_C_CONTIGUOUS)) return Gate::kSkip;
  bool open = false, evicted = true;
  if (!attribute_true((*p)->kernel, open_name, &open) || !attribute_true((*p)->signature, evicted_name, &evicted))
    return Gate::kError;
  return open && !evicted ? Gate::kRun : Gate::kSkip;
}

// Claims the block for a call before anything is written into it: 1 (a small call, or a large
// one that `enter` let run and that now has the block), 0 (take the ctypes path: another
// thread's large call has the block, or the kernel closed) or -1 (a Python error).
// The block is marked taken before `enter` runs: `enter` is Python code, during which another
// thread may run and claim too (both would then write their outputs' pointers into one block,
// and one call's result would come back unwritten). A small call marks it as well: allocating
// its outputs may run a finalizer, and another thread with it.
int claim(Prepared *p) {
  if (p->in_use) return 0;
  p->in_use = true;
  if (p->enter == nullptr) return 1;
  PyObject *ok = PyObject_CallNoArgs(p->enter);
  if (ok == nullptr) {
    p->in_use = false;
    return -1;
  }
  const int go = PyObject_IsTrue(ok);
  Py_DECREF(ok);
  if (go != 1) p->in_use = false;
  return go;
}

// Gives a claimed block back without running (a Python error is set: kept across `leave`).
void unclaim(Prepared *p) {
  p->in_use = false;
  if (p->enter == nullptr) return;
  PyObject *type, *value, *trace;
  PyErr_Fetch(&type, &value, &trace);
  PyObject *left = PyObject_CallNoArgs(p->leave);
  Py_XDECREF(left);
  PyErr_Restore(type, value, trace);
}

// Runs the kernel on `inputs` (the block claimed, the outputs' pointers in it): `result` when it
// returned 0, else (`result` released) the shim's status as an int. A large call runs with the
// GIL released; one that failed keeps the block until `release`: the caller reads its error
// from the block first.
PyObject *run(Prepared *p, PyObject *const *inputs, PyObject *result) {
  const bool large = p->enter != nullptr;
  for (Py_ssize_t i = 0; i < p->n_inputs; ++i)
    p->block->params[i] = PyArray_DATA(reinterpret_cast<PyArrayObject *>(inputs[i]));
  int status;
  if (large) {
    Py_BEGIN_ALLOW_THREADS
    status = p->main(p->block);
    Py_END_ALLOW_THREADS
  } else {
    status = p->main(p->block);
  }
  const bool ok = status == 0 && p->block->result == 0;
  if (!large) {
    p->in_use = false;   // (a small call's error is read before any other call runs)
  } else {
    if (ok) p->in_use = false;
    PyObject *left = PyObject_CallNoArgs(p->leave);
    if (left == nullptr) return Py_DECREF(result), nullptr;
    Py_DECREF(left);
  }
  if (ok) return result;
  Py_DECREF(result);
  return PyLong_FromLong(status);
}

// release(prepared): a failed large call's block is free again (its error has been read).
PyObject *release(PyObject *, PyObject *capsule) {
  auto *p = static_cast<Prepared *>(PyCapsule_GetPointer(capsule, kCapsule));
  if (p == nullptr) return nullptr;
  p->in_use = false;
  Py_RETURN_NONE;
}

// call(prepared, *inputs): the outputs (one array, or a tuple of them) when the kernel ran and
// returned 0; False when the call is not one this path runs (nothing was done); otherwise the
// shim's status as an int (the block's result and error say the rest).
PyObject *call(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  Prepared *p;
  const Gate g = gate(args, nargs, 0, "call(prepared, *inputs)", &p);
  if (g != Gate::kRun) return g == Gate::kSkip ? Py_NewRef(Py_False) : nullptr;
  const int go = claim(p);
  if (go != 1) return go == 0 ? Py_NewRef(Py_False) : nullptr;
  PyObject *result = allocate(p->outputs, p->block->params + p->n_inputs);
  if (result == nullptr) return unclaim(p), nullptr;
  return run(p, args + 1, result);
}

// Whether `object` is an array the kernel may write output `o` into exactly as the ctypes path
// would (an ndarray, exactly; C-contiguous, aligned and writeable; o's shape and dtype).
bool output_array(PyObject *object, const Output &o) {
  if (!PyArray_CheckExact(object)) return false;
  auto *array = reinterpret_cast<PyArrayObject *>(object);
  if (!PyArray_CHKFLAGS(array, NPY_ARRAY_CARRAY) || PyArray_NDIM(array) != static_cast<int>(o.dims.size()))
    return false;
  for (size_t d = 0; d < o.dims.size(); ++d) {
    if (PyArray_DIM(array, static_cast<int>(d)) != o.dims[d]) return false;
  }
  return PyArray_EquivTypes(PyArray_DESCR(array), o.descr) != 0;
}

// call_out(prepared, out, *inputs): `call` writing into `out` (one array, or a tuple or list of
// them, one per output) instead of fresh outputs: the output array (one output) or a tuple of
// them when the kernel ran and returned 0, as the ctypes path returns them; False, with nothing
// done, where an input or an output is not one this path takes (the ctypes path then checks
// them and says what is wrong); otherwise the shim's status. (A small signature's `out=` calls
// took the ctypes path's Python: ~3 us of a ~4.5 us call.)
PyObject *call_out(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  Prepared *p;
  const Gate g = gate(args, nargs, 1, "call_out(prepared, out, *inputs)", &p);
  if (g != Gate::kRun) return g == Gate::kSkip ? Py_NewRef(Py_False) : nullptr;
  const Py_ssize_t n_out = static_cast<Py_ssize_t>(p->outputs.size());
  PyObject *out = args[1];
  const bool several = PyTuple_CheckExact(out) || PyList_CheckExact(out);
  if (several ? PySequence_Fast_GET_SIZE(out) != n_out : n_out != 1) Py_RETURN_FALSE;
  PyObject *const *outs = several ? PySequence_Fast_ITEMS(out) : &out;
  for (Py_ssize_t k = 0; k < n_out; ++k) {
    if (!output_array(outs[k], p->outputs[k])) Py_RETURN_FALSE;
  }
  const int go = claim(p);
  if (go != 1) return go == 0 ? Py_NewRef(Py_False) : nullptr;
  PyObject *result = n_out == 1 ? Py_NewRef(outs[0]) : PyTuple_New(n_out);
  if (result == nullptr) return unclaim(p), nullptr;
  for (Py_ssize_t k = 0; k < n_out; ++k) {
    if (n_out > 1) PyTuple_SET_ITEM(result, k, Py_NewRef(outs[k]));
    p->block->params[p->n_inputs + k] = PyArray_DATA(reinterpret_cast<PyArrayObject *>(outs[k]));
  }
  return run(p, args + 2, result);
}

// --- the Numba backend's runners (fusegen.rt.numba_cpu): fresh outputs in one C call -------------
// A runner's compiled functions are typed for C-contiguous, aligned arrays; where every input is
// one, `fresh` allocates the outputs (np.empty's arrays, without np.empty's argument parsing: a
// third of a small call's cost for three outputs) in the call that checks them.
const char *const kFreshCapsule = "fusegen.fastcall.Fresh";

struct Fresh {
  Py_ssize_t n_inputs;
  std::vector<Output> outputs;
};

void destroy_fresh(PyObject *capsule) {
  auto *p = static_cast<Fresh *>(PyCapsule_GetPointer(capsule, kFreshCapsule));
  if (p == nullptr) return;
  release_outputs(&p->outputs);
  delete p;
}

// prepare_fresh(n_inputs, [(shape, dtype), ...]) -> capsule
PyObject *prepare_fresh(PyObject *, PyObject *args) {
  PyObject *outputs;
  Py_ssize_t n_inputs;
  if (!PyArg_ParseTuple(args, "nO!", &n_inputs, &PyList_Type, &outputs)) return nullptr;
  auto *p = new Fresh{n_inputs, {}};
  PyObject *capsule = PyCapsule_New(p, kFreshCapsule, destroy_fresh);
  if (capsule == nullptr) {
    delete p;
    return nullptr;
  }
  if (n_inputs < 0 || PyList_GET_SIZE(outputs) < 1) {
    PyErr_SetString(PyExc_ValueError, "prepare_fresh needs n_inputs >= 0 and at least one output");
    return Py_DECREF(capsule), nullptr;
  }
  if (!parse_outputs(outputs, &p->outputs)) return Py_DECREF(capsule), nullptr;
  return capsule;
}

// fresh(prepared, *inputs): the outputs (one array, or a tuple) when every input is an ndarray
// (exactly), C-contiguous and aligned; False otherwise, with nothing allocated.
PyObject *fresh(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  auto *p = nargs > 0 ? static_cast<Fresh *>(PyCapsule_GetPointer(args[0], kFreshCapsule)) : nullptr;
  if (p == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "fresh(prepared, *inputs)");
    return nullptr;
  }
  if (nargs - 1 != p->n_inputs || !plain_arrays(args + 1, p->n_inputs, NPY_ARRAY_CARRAY_RO)) Py_RETURN_FALSE;
  return allocate(p->outputs, nullptr);
}

// --- out= arrays that share memory with inputs (fusegen.rt.kernel) ----------------------------

// The bytes [lo, hi) an array's elements span; false for an empty array, which spans none.
bool extent(PyArrayObject *a, const char **lo, const char **hi) {
  const char *l = PyArray_BYTES(a), *h = l + PyArray_ITEMSIZE(a);
  for (int d = 0; d < PyArray_NDIM(a); ++d) {
    const npy_intp n = PyArray_DIM(a, d);
    if (n == 0) return false;
    const npy_intp span = (n - 1) * PyArray_STRIDE(a, d);
    (span < 0 ? l : h) += span;
  }
  *lo = l;
  *hi = h;
  return true;
}

// overlap(out, *inputs): whether an ndarray of `out` (one, or a tuple or list of them; anything
// else counts as none) spans bytes that an ndarray among `inputs` spans. Bounds only, as
// np.may_share_memory's default: interleaved views count as overlapping. The kernels' fast path
// writes out= arrays as they are; where this is true the call takes the path that makes the
// kernel read every input before an output overwrites it (fusegen.rt.kernel).
PyObject *overlap(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "overlap(out, *inputs)");
    return nullptr;
  }
  PyObject *out = args[0];
  const bool several = PyTuple_CheckExact(out) || PyList_CheckExact(out);
  const Py_ssize_t n_out = several ? PySequence_Fast_GET_SIZE(out) : 1;
  PyObject *const *outs = several ? PySequence_Fast_ITEMS(out) : &out;
  for (Py_ssize_t k = 0; k < n_out; ++k) {
    const char *lo, *hi;
    if (!PyArray_Check(outs[k]) || !extent(reinterpret_cast<PyArrayObject *>(outs[k]), &lo, &hi)) continue;
    for (Py_ssize_t i = 1; i < nargs; ++i) {
      const char *l, *h;
      if (PyArray_Check(args[i]) && extent(reinterpret_cast<PyArrayObject *>(args[i]), &l, &h) && l < hi && lo < h)
        Py_RETURN_TRUE;
    }
  }
  Py_RETURN_FALSE;
}

// empty(shape, dtype): np.empty's array, its data 64-byte aligned from kAlignBytes on.
PyObject *empty(PyObject *, PyObject *args) {
  PyObject *shape, *dtype;
  if (!PyArg_ParseTuple(args, "OO", &shape, &dtype)) return nullptr;
  PyObject *list = Py_BuildValue("[(OO)]", shape, dtype);
  if (list == nullptr) return nullptr;
  std::vector<Output> one;
  const bool ok = parse_outputs(list, &one);
  Py_DECREF(list);
  PyObject *array = ok ? allocate(one, nullptr) : nullptr;
  release_outputs(&one);
  return array;
}

PyMethodDef methods[] = {
    {"empty", empty, METH_VARARGS, "empty(shape, dtype) -> array (64-byte aligned data from 64 KiB on)"},
    {"overlap", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(overlap)), METH_FASTCALL,
     "overlap(out, *inputs) -> whether an out= array spans bytes an input spans"},
    {"prepare", prepare, METH_VARARGS,
     "prepare(kernel, signature, call_main, block, n_inputs, [(shape, dtype), ...][, enter, leave]) -> prepared"},
    {"release", release, METH_O, "release(prepared): a failed large call's block is free again"},
    {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call)), METH_FASTCALL,
     "call(prepared, *inputs) -> outputs | False | status"},
    {"call_out", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call_out)), METH_FASTCALL,
     "call_out(prepared, out, *inputs) -> outputs | False | status"},
    {"prepare_fresh", prepare_fresh, METH_VARARGS, "prepare_fresh(n_inputs, [(shape, dtype), ...]) -> prepared"},
    {"fresh", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fresh)), METH_FASTCALL,
     "fresh(prepared, *inputs) -> outputs | False"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "fusegen_fastcall", nullptr, -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_fusegen_fastcall(void) {
  import_array();
  open_name = PyUnicode_InternFromString("_open");
  evicted_name = PyUnicode_InternFromString("evicted");
  if (open_name == nullptr || evicted_name == nullptr) return nullptr;
  aligned_capsule = PyCapsule_New(&aligned_handler, "mem_handler", nullptr);   // (kept for good)
  if (aligned_capsule == nullptr) return nullptr;
  return PyModule_Create(&module);
}
