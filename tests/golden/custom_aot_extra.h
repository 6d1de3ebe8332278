// custom_aot_extra.h -- fusegen's header for MindSpore-style AOT custom kernels.
//
// Written for fusegen; it is API- and vtable-compatible with the dependency-free
// user-side header MindSpore's test suite ships (global namespace).  A kernel
// compiled against it runs inside MindSpore and inside fusegen's AotKernel host.
//
// Layout is the whole contract here: the host (MindSpore, or fusegen's
// aot_host.cc) implements AotExtra, and the kernel calls into it through the
// vtable and reads the data members directly through the inline accessors.  So:
//   * the order of the virtual functions below must never change (the Itanium
//     C++ ABI assigns vtable slots in declaration order);
//   * the data members must stay `workspace_` then `kernel_data_`;
//   * kernel and host must agree on the libstdc++ string ABI, because the
//     virtual getters take and return std::string by value.  MindSpore 2.x is
//     built with -D_GLIBCXX_USE_CXX11_ABI=0; fusegen's host matches either.
//
// Nothing here may be added as a virtual function or data member: that would
// break kernels already compiled against MindSpore's header.

#ifndef FUSEGEN_CUSTOM_AOT_EXTRA_H_
#define FUSEGEN_CUSTOM_AOT_EXTRA_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

// MindSpore type ids, as NameInferType receives and returns them.
//
// Only an opaque declaration: MindSpore's own examples define
// `enum TypeId : int {};` in the kernel source, and a second full definition
// here would not compile.  Redeclaring an opaque enum is legal, and a fixed
// underlying type makes it complete, so the named constants below still work.
// The values are those of MindSpore 2.x's TypeId (kNumberTypeBegin is 29).
enum TypeId : int;

constexpr TypeId kNumberTypeBool = static_cast<TypeId>(30);
constexpr TypeId kNumberTypeInt8 = static_cast<TypeId>(32);
constexpr TypeId kNumberTypeInt16 = static_cast<TypeId>(33);
constexpr TypeId kNumberTypeInt32 = static_cast<TypeId>(34);
constexpr TypeId kNumberTypeInt64 = static_cast<TypeId>(35);
constexpr TypeId kNumberTypeUInt8 = static_cast<TypeId>(37);
constexpr TypeId kNumberTypeUInt16 = static_cast<TypeId>(38);
constexpr TypeId kNumberTypeUInt32 = static_cast<TypeId>(39);
constexpr TypeId kNumberTypeUInt64 = static_cast<TypeId>(40);
constexpr TypeId kNumberTypeFloat16 = static_cast<TypeId>(42);
constexpr TypeId kNumberTypeFloat32 = static_cast<TypeId>(43);
constexpr TypeId kNumberTypeFloat64 = static_cast<TypeId>(44);
constexpr TypeId kNumberTypeBFloat16 = static_cast<TypeId>(45);
constexpr TypeId kNumberTypeComplex64 = static_cast<TypeId>(48);
constexpr TypeId kNumberTypeComplex128 = static_cast<TypeId>(49);

// Base class of whatever a kernel's Init wants to keep until the kernel is
// destroyed.  The virtual destructor is what lets the host delete a derived
// object it knows nothing about (AotExtra::DestructKernelData).
class AotKernelData {
 public:
  AotKernelData() = default;
  virtual ~AotKernelData() = default;
};

// The host's side of a kernel instance: attributes, workspace sizes and the
// kernel's private data.  Abstract: only the host can create one.
class AotExtra {
 public:
  AotExtra() = default;
  virtual ~AotExtra() = default;

  virtual bool HasAttr(std::string name) = 0;

  // Reads attribute `name` as T.  Only the eight specialisations below exist;
  // any other T is a compile error here rather than a silent default value
  // (MindSpore's header returns T() for it).
  template <typename T>
  T Attr(std::string name) {
    static_assert(sizeof(T) == 0,
                  "AotExtra::Attr<T>: T must be bool, int64_t, float, std::string, "
                  "std::vector<int64_t>, std::vector<float> or a vector of those vectors");
    (void)name;
    return T();
  }

  // Workspace sizes are in bytes, one entry per workspace.  The host allocates
  // them after Init and appends them to `params` after the outputs.
  void SetWorkSpace(const std::vector<size_t> &workspace) { workspace_ = workspace; }
  const std::vector<size_t> &WorkSpace() const { return workspace_; }

  // The extra owns the kernel data from here on; the host calls
  // DestructKernelData() before it unloads the kernel's library, while the
  // derived class's destructor code is still mapped.
  void SetKernelData(AotKernelData *kernel_data) { kernel_data_ = kernel_data; }
  AotKernelData *KernelData() const { return kernel_data_; }
  void DestructKernelData() {
    delete kernel_data_;
    kernel_data_ = nullptr;
  }

 private:
  // Vtable slots 3..10 (after the two destructor entries and HasAttr).
  virtual bool GetAttrBool(std::string name) = 0;
  virtual int64_t GetAttrInt(std::string name) = 0;
  virtual float GetAttrFloat(std::string name) = 0;
  virtual std::string GetAttrStr(std::string name) = 0;
  virtual std::vector<int64_t> GetAttrIntVec(std::string name) = 0;
  virtual std::vector<float> GetAttrFloatVec(std::string name) = 0;
  virtual std::vector<std::vector<int64_t>> GetAttrInt2DVec(std::string name) = 0;
  virtual std::vector<std::vector<float>> GetAttrFloat2DVec(std::string name) = 0;

  std::vector<size_t> workspace_;
  AotKernelData *kernel_data_{nullptr};
};

template <>
inline bool AotExtra::Attr<bool>(std::string name) {
  return GetAttrBool(name);
}

template <>
inline int64_t AotExtra::Attr<int64_t>(std::string name) {
  return GetAttrInt(name);
}

template <>
inline float AotExtra::Attr<float>(std::string name) {
  return GetAttrFloat(name);
}

template <>
inline std::string AotExtra::Attr<std::string>(std::string name) {
  return GetAttrStr(name);
}

template <>
inline std::vector<int64_t> AotExtra::Attr<std::vector<int64_t>>(std::string name) {
  return GetAttrIntVec(name);
}

template <>
inline std::vector<float> AotExtra::Attr<std::vector<float>>(std::string name) {
  return GetAttrFloatVec(name);
}

template <>
inline std::vector<std::vector<int64_t>> AotExtra::Attr<std::vector<std::vector<int64_t>>>(std::string name) {
  return GetAttrInt2DVec(name);
}

template <>
inline std::vector<std::vector<float>> AotExtra::Attr<std::vector<std::vector<float>>>(std::string name) {
  return GetAttrFloat2DVec(name);
}

#endif  // FUSEGEN_CUSTOM_AOT_EXTRA_H_
