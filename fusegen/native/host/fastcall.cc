// The AOT backend's small-call path (fusegen.native.fastcall): one CPython call that checks the
// arrays, writes their data pointers into a prepared argument block and calls the kernel through
// the host shim's fg_call_main, in place of a Python loop over ctypes objects and a ctypes call
// (most of a small call's cost: ~3 us of a 6 us call at (4, 5)).
//
// It runs only what it can run exactly as the Python path would; anything else returns False
// and the caller takes that path (which copies, checks and reports): an input that is not a
// C-contiguous ndarray, an output that is not a writeable one, a closed kernel or an evicted
// signature. It holds the GIL from those checks to the kernel's return, so no other thread can
// close the kernel, evict the signature or use the block in between; hence it is used only for
// calls small enough that holding the GIL costs others nothing worth a thread switch.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h>

#include <cstdint>

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

PyTypeObject *ndarray_type = nullptr;
PyObject *open_name = nullptr, *evicted_name = nullptr;

bool attribute_true(PyObject *owner, PyObject *name, bool *value) {
  PyObject *v = PyObject_GetAttr(owner, name);
  if (v == nullptr) return false;
  int truth = PyObject_IsTrue(v);
  Py_DECREF(v);
  if (truth < 0) return false;
  *value = truth != 0;
  return true;
}

// setup(ndarray type): what "an array" is (numpy's own type object, compared by identity).
PyObject *setup(PyObject *, PyObject *type) {
  if (!PyType_Check(type)) {
    PyErr_SetString(PyExc_TypeError, "setup expects numpy.ndarray");
    return nullptr;
  }
  Py_INCREF(type);
  Py_XSETREF(ndarray_type, reinterpret_cast<PyTypeObject *>(type));
  Py_RETURN_NONE;
}

// call(kernel, signature, call_main, block, n_outputs, *arrays): None when the kernel ran and
// returned 0; False when the call is not one this path runs (nothing was done); otherwise the
// shim's status (the block's result and error say the rest).
PyObject *call(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 5 || ndarray_type == nullptr) {
    PyErr_SetString(PyExc_TypeError, "call(kernel, signature, call_main, block, n_outputs, *arrays)");
    return nullptr;
  }
  auto main = reinterpret_cast<CallMain>(PyLong_AsVoidPtr(args[2]));
  auto *block = static_cast<FgCall *>(PyLong_AsVoidPtr(args[3]));
  Py_ssize_t n_out = PyLong_AsSsize_t(args[4]);
  if (PyErr_Occurred()) return nullptr;
  Py_ssize_t n = nargs - 5, first_out = n - n_out;
  if (n_out < 0 || first_out < 0 || n > block->nparam) Py_RETURN_FALSE;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *a = args[5 + i];
    if (Py_TYPE(a) != ndarray_type) Py_RETURN_FALSE;
    int need = i < first_out ? NPY_ARRAY_C_CONTIGUOUS : NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_WRITEABLE;
    if ((PyArray_FLAGS(reinterpret_cast<PyArrayObject *>(a)) & need) != need) Py_RETURN_FALSE;
  }
  bool open = false, evicted = true;
  if (!attribute_true(args[0], open_name, &open) || !attribute_true(args[1], evicted_name, &evicted)) return nullptr;
  if (!open || evicted) Py_RETURN_FALSE;
  for (Py_ssize_t i = 0; i < n; ++i)
    block->params[i] = PyArray_DATA(reinterpret_cast<PyArrayObject *>(args[5 + i]));
  int status = main(block);
  if (status == 0 && block->result == 0) Py_RETURN_NONE;
  return PyLong_FromLong(status);
}

PyMethodDef methods[] = {
    {"setup", setup, METH_O, "setup(numpy.ndarray)"},
    {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call)), METH_FASTCALL,
     "call(kernel, signature, call_main, block, n_outputs, *arrays) -> None | False | status"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "fusegen_fastcall", nullptr, -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_fusegen_fastcall(void) {
  open_name = PyUnicode_InternFromString("_open");
  evicted_name = PyUnicode_InternFromString("evicted");
  if (open_name == nullptr || evicted_name == nullptr) return nullptr;
  return PyModule_Create(&module);
}
