// anvil CUDA support: inlined once into every CUDA module (the include guard keeps it once per translation unit).
// The CUDA driver API and NVRTC are loaded with dlopen when the first workspace is created: this header compiles with
// any C++17 compiler and no CUDA toolkit, and init_ws() on a machine without a driver, a GPU or NVRTC throws a
// std::runtime_error saying which is missing. Linux only (dlopen; the driver's soname).
#ifndef ANVIL_CUDA_HPP
#define ANVIL_CUDA_HPP
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace anvil {
namespace cuda {

/// A device address (the driver API's CUdeviceptr).
using DevicePtr = unsigned long long;

/// Grid or block dimensions of a kernel launch.
struct Dim3 {
  unsigned x, y, z;
};

namespace detail {
using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using nvrtcProgram = struct _nvrtcProgram*;
using NvrtcSize = int (*)(nvrtcProgram, std::size_t*);
using NvrtcGet = int (*)(nvrtcProgram, char*);

inline constexpr int kComputeCapabilityMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
inline constexpr int kComputeCapabilityMinor = 76;
inline constexpr const char* kDriverLibrary = "libcuda.so.1";
/// NVRTC's soname carries its major version; ANVIL_NVRTC_LIBRARY (a path) is tried first.
inline constexpr const char* kNvrtcLibraries[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"};

/// The driver API and NVRTC entry points anvil uses.
struct Api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuMemAlloc)(DevicePtr*, std::size_t);
  CUresult (*cuMemFree)(DevicePtr);
  CUresult (*cuMemcpyHtoD)(DevicePtr, const void*, std::size_t);
  CUresult (*cuMemcpyDtoH)(void*, DevicePtr, std::size_t);
  CUresult (*cuMemcpyDtoD)(DevicePtr, DevicePtr, std::size_t);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  int (*nvrtcVersion)(int*, int*);
  int (*nvrtcGetNumSupportedArchs)(int*);
  int (*nvrtcGetSupportedArchs)(int*);
  int (*nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
  int (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*);
  NvrtcSize nvrtcGetProgramLogSize;
  NvrtcGet nvrtcGetProgramLog;
  NvrtcSize nvrtcGetCUBINSize;
  NvrtcGet nvrtcGetCUBIN;
  NvrtcSize nvrtcGetPTXSize;
  NvrtcGet nvrtcGetPTX;
  int (*nvrtcDestroyProgram)(nvrtcProgram*);
  const char* (*nvrtcGetErrorString)(int);
};

template <typename F>
inline void bind(F& f, void* library, const char* name, const char* library_name) {
  void* p = dlsym(library, name);
  if (p == nullptr) throw std::runtime_error(std::string("anvil: ") + library_name + " has no symbol " + name);
  std::memcpy(&f, &p, sizeof f);  // NOTE: a data pointer to a function pointer, without a conditionally-supported cast
}

inline void* open_nvrtc(std::string& tried) {
  if (const char* path = std::getenv("ANVIL_NVRTC_LIBRARY")) {
    if (void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)) return lib;
    tried += std::string(path) + " (" + dlerror() + "), ";
  }
  for (const char* name : kNvrtcLibraries) {
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return lib;
    tried += std::string(name) + ", ";
  }
  return nullptr;
}

inline Api load() {
  void* cu = dlopen(kDriverLibrary, RTLD_NOW | RTLD_LOCAL);
  if (cu == nullptr) {
    throw std::runtime_error(std::string("anvil: no CUDA driver: cannot load ") + kDriverLibrary + " (" + dlerror() +
                             ")");
  }
  std::string tried;
  void* rtc = open_nvrtc(tried);
  if (rtc == nullptr) {
    throw std::runtime_error("anvil: NVRTC not found (tried " + tried +
                             "set ANVIL_NVRTC_LIBRARY to the path of libnvrtc.so, or install the CUDA toolkit)");
  }
  Api a{};
#define ANVIL_CU(field, symbol) bind(a.field, cu, symbol, kDriverLibrary)
#define ANVIL_RTC(field) bind(a.field, rtc, #field, "NVRTC")
  ANVIL_CU(cuInit, "cuInit");
  ANVIL_CU(cuDeviceGet, "cuDeviceGet");
  ANVIL_CU(cuDeviceGetAttribute, "cuDeviceGetAttribute");
  ANVIL_CU(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  ANVIL_CU(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  ANVIL_CU(cuCtxSetCurrent, "cuCtxSetCurrent");
  ANVIL_CU(cuCtxSynchronize, "cuCtxSynchronize");
  ANVIL_CU(cuModuleLoadData, "cuModuleLoadData");
  ANVIL_CU(cuModuleUnload, "cuModuleUnload");
  ANVIL_CU(cuModuleGetFunction, "cuModuleGetFunction");
  ANVIL_CU(cuMemAlloc, "cuMemAlloc_v2");
  ANVIL_CU(cuMemFree, "cuMemFree_v2");
  ANVIL_CU(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  ANVIL_CU(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  ANVIL_CU(cuMemcpyDtoD, "cuMemcpyDtoD_v2");
  ANVIL_CU(cuLaunchKernel, "cuLaunchKernel");
  ANVIL_CU(cuGetErrorString, "cuGetErrorString");
  ANVIL_RTC(nvrtcVersion);
  ANVIL_RTC(nvrtcGetNumSupportedArchs);
  ANVIL_RTC(nvrtcGetSupportedArchs);
  ANVIL_RTC(nvrtcCreateProgram);
  ANVIL_RTC(nvrtcCompileProgram);
  ANVIL_RTC(nvrtcGetProgramLogSize);
  ANVIL_RTC(nvrtcGetProgramLog);
  ANVIL_RTC(nvrtcGetCUBINSize);
  ANVIL_RTC(nvrtcGetCUBIN);
  ANVIL_RTC(nvrtcGetPTXSize);
  ANVIL_RTC(nvrtcGetPTX);
  ANVIL_RTC(nvrtcDestroyProgram);
  ANVIL_RTC(nvrtcGetErrorString);
#undef ANVIL_CU
#undef ANVIL_RTC
  return a;
}

/// The entry points, loaded on first use (a failed load throws, and the next use tries again).
inline const Api& api() {
  static const Api instance = load();
  return instance;
}

inline void check(CUresult result, const char* what) {
  if (result == 0) return;
  const char* message = nullptr;
  api().cuGetErrorString(result, &message);
  throw std::runtime_error(std::string("anvil: CUDA error in ") + what + ": " + (message ? message : "unknown error") +
                           " (" + std::to_string(result) + ")");
}

inline void check_nvrtc(int result, const char* what) {
  if (result == 0) return;
  throw std::runtime_error(std::string("anvil: NVRTC error in ") + what + ": " + api().nvrtcGetErrorString(result));
}

inline std::string& cache_folder() {
  static std::string folder;
  return folder;
}

inline std::mutex& cache_mutex() {
  static std::mutex mutex;
  return mutex;
}

/// 64-bit FNV-1a of the kernel source and the NVRTC options: the name of a cached program.
inline std::string program_key(const std::string& source, const std::string& options) {
  unsigned long long h = 14695981039346656037ull;
  for (const std::string* s : {&source, &options}) {
    for (char c : *s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  }
  char key[17];
  std::snprintf(key, sizeof key, "%016llx", h);
  return key;
}

/// The NVRTC option selecting the code to build for compute capability `sm`, and whether it yields PTX.
/// NOTE: the GPU's own architecture when NVRTC knows it (a CUBIN, no driver JIT); otherwise PTX for the newest
/// architecture NVRTC knows below it, which the driver compiles (a GPU newer than the NVRTC still works).
inline std::string architecture_option(int sm, bool& ptx) {
  const Api& a = api();
  int count = 0;
  check_nvrtc(a.nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs");
  std::vector<int> archs(static_cast<std::size_t>(count));
  check_nvrtc(a.nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
  ptx = std::find(archs.begin(), archs.end(), sm) == archs.end();
  if (!ptx) return "--gpu-architecture=sm_" + std::to_string(sm);
  int best = -1;
  for (int arch : archs) {
    if (arch <= sm) best = std::max(best, arch);
  }
  if (best < 0) {
    throw std::runtime_error("anvil: the GPU (sm_" + std::to_string(sm) +
                             ") is older than every architecture this NVRTC supports");
  }
  return "--gpu-architecture=compute_" + std::to_string(best);
}

inline std::string nvrtc_compile(const char* source, const std::string& option, bool ptx) {
  const Api& a = api();
  nvrtcProgram program = nullptr;
  check_nvrtc(a.nvrtcCreateProgram(&program, source, "anvil_kernels.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
  const char* options[] = {option.c_str()};
  const int status = a.nvrtcCompileProgram(program, 1, options);
  std::size_t size = 0;
  std::string out;
  if (status != 0) {
    a.nvrtcGetProgramLogSize(program, &size);
    out.resize(size);
    a.nvrtcGetProgramLog(program, &out[0]);
    a.nvrtcDestroyProgram(&program);
    throw std::runtime_error("anvil: NVRTC could not compile the kernels (" + option + "): " + out);
  }
  check_nvrtc((ptx ? a.nvrtcGetPTXSize : a.nvrtcGetCUBINSize)(program, &size), "nvrtcGetCUBINSize");
  out.resize(size);
  check_nvrtc((ptx ? a.nvrtcGetPTX : a.nvrtcGetCUBIN)(program, &out[0]), "nvrtcGetCUBIN");
  a.nvrtcDestroyProgram(&program);
  return out;
}

/// The kernels compiled for compute capability `sm`: read from the program cache folder when one is set and holds
/// them, else compiled with NVRTC (and stored there, atomically).
inline std::string compile(const char* source, int sm) {
  bool ptx = false;
  const std::string option = architecture_option(sm, ptx);
  int major = 0, minor = 0;
  api().nvrtcVersion(&major, &minor);
  const std::string key = program_key(source, option + " nvrtc " + std::to_string(major) + "." + std::to_string(minor));
  std::string folder;
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    folder = cache_folder();
  }
  const std::string path = folder + "/" + key + (ptx ? ".ptx" : ".cubin");
  if (!folder.empty()) {
    std::ifstream in(path, std::ios::binary);
    if (in) return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::string binary = nvrtc_compile(source, option, ptx);
  if (!folder.empty()) {
    const std::string tmp = path + "." + std::to_string(getpid()) + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(binary.data(), static_cast<std::streamsize>(binary.size()));
    if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
  }
  return binary;
}
}  // namespace detail

/// Sets the folder (which must exist) where compiled kernels are cached across processes; empty (the default)
/// compiles them in every init_ws().
inline void set_program_cache(const std::string& folder) {
  std::lock_guard<std::mutex> lock(detail::cache_mutex());
  detail::cache_folder() = folder;
}

/// One function's GPU state on the first CUDA device: its compiled kernels and one device allocation holding the
/// intermediates, the captured constants and staging room for the inputs and outputs. Move-only.
class Workspace {
 public:
  /// Compiles `source` for the GPU's architecture, finds the `count` kernels named `kernels` and allocates `nbytes`.
  Workspace(const char* source, const char* const* kernels, std::size_t count, std::size_t nbytes) : nbytes_(nbytes) {
    const detail::Api& a = detail::api();
    detail::check(a.cuInit(0), "cuInit");
    detail::check(a.cuDeviceGet(&device_, 0), "cuDeviceGet");
    detail::check(a.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
    try {
      activate();
      if (count > 0) {
        int major = 0, minor = 0;
        detail::check(a.cuDeviceGetAttribute(&major, detail::kComputeCapabilityMajor, device_), "cuDeviceGetAttribute");
        detail::check(a.cuDeviceGetAttribute(&minor, detail::kComputeCapabilityMinor, device_), "cuDeviceGetAttribute");
        const std::string binary = detail::compile(source, major * 10 + minor);
        detail::check(a.cuModuleLoadData(&module_, binary.data()), "cuModuleLoadData");
        functions_.resize(count);
        for (std::size_t i = 0; i < count; ++i) {
          detail::check(a.cuModuleGetFunction(&functions_[i], module_, kernels[i]), "cuModuleGetFunction");
        }
      }
      if (nbytes_ > 0) detail::check(a.cuMemAlloc(&base_, nbytes_), "cuMemAlloc");
    } catch (...) {
      release();
      throw;
    }
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  Workspace(Workspace&& other) noexcept { take(other); }
  Workspace& operator=(Workspace&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  ~Workspace() { release(); }

  /// The device address `offset` bytes into the allocation.
  DevicePtr at(std::size_t offset) const noexcept { return base_ + offset; }
  /// Makes the workspace's context current on the calling thread.
  void activate() const { detail::check(detail::api().cuCtxSetCurrent(context_), "cuCtxSetCurrent"); }
  void upload(DevicePtr dst, const void* src, std::size_t n) const {
    if (n > 0) detail::check(detail::api().cuMemcpyHtoD(dst, src, n), "cuMemcpyHtoD");
  }
  void download(void* dst, DevicePtr src, std::size_t n) const {
    if (n > 0) detail::check(detail::api().cuMemcpyDtoH(dst, src, n), "cuMemcpyDtoH");
  }
  void copy(DevicePtr dst, DevicePtr src, std::size_t n) const {
    if (n > 0) detail::check(detail::api().cuMemcpyDtoD(dst, src, n), "cuMemcpyDtoD");
  }
  /// Enqueues kernel `kernel` on the default stream, one device address per parameter.
  template <std::size_t N>
  void launch(std::size_t kernel, Dim3 grid, Dim3 block, const DevicePtr (&args)[N]) const {
    void* params[N];
    for (std::size_t i = 0; i < N; ++i) params[i] = const_cast<DevicePtr*>(&args[i]);
    detail::check(detail::api().cuLaunchKernel(functions_[kernel], grid.x, grid.y, grid.z, block.x, block.y, block.z, 0,
                                               nullptr, params, nullptr),
                  "cuLaunchKernel");
  }
  /// Waits for every kernel and copy enqueued so far.
  void synchronize() const { detail::check(detail::api().cuCtxSynchronize(), "cuCtxSynchronize"); }

 private:
  void take(Workspace& other) noexcept {
    device_ = other.device_;
    context_ = std::exchange(other.context_, nullptr);
    module_ = std::exchange(other.module_, nullptr);
    functions_ = std::move(other.functions_);
    base_ = std::exchange(other.base_, 0);
    nbytes_ = other.nbytes_;
  }
  void release() noexcept {
    if (context_ == nullptr) return;
    const detail::Api& a = detail::api();
    a.cuCtxSetCurrent(context_);
    if (base_ != 0) a.cuMemFree(base_);
    if (module_ != nullptr) a.cuModuleUnload(module_);
    a.cuDevicePrimaryCtxRelease(device_);
    context_ = nullptr;
    module_ = nullptr;
    base_ = 0;
  }

  detail::CUdevice device_ = 0;
  detail::CUcontext context_ = nullptr;
  detail::CUmodule module_ = nullptr;
  std::vector<detail::CUfunction> functions_;
  DevicePtr base_ = 0;
  std::size_t nbytes_ = 0;
};

}  // namespace cuda
}  // namespace anvil
#endif  // ANVIL_CUDA_HPP
