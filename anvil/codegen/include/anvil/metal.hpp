// anvil Metal support: inlined once into every Metal module (the include guard keeps it once per translation unit).
// Plain C++17 over the Objective-C runtime: Metal and libobjc are loaded with dlopen when the first workspace is
// created, so this header compiles with any C++17 compiler (no Objective-C++, no metal-cpp), and init_ws() away from
// macOS throws a std::runtime_error saying so. Buffers use shared storage: uploads and downloads are memcpys.
#ifndef ANVIL_METAL_HPP
#define ANVIL_METAL_HPP
#include <dlfcn.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace anvil {
namespace metal {

/// A byte offset into the workspace's Metal buffer.
using DevicePtr = std::size_t;

/// Threadgroups of a dispatch, or threads of one threadgroup.
struct Dim3 {
  unsigned x, y, z;
};

namespace detail {
using id = void*;
using SEL = void*;

struct MTLSize {
  unsigned long width, height, depth;
};

inline constexpr const char* kLibraries[] = {
    "/usr/lib/libobjc.A.dylib",
    "/System/Library/Frameworks/Foundation.framework/Foundation",
    // NOTE: CoreGraphics must be loaded for MTLCreateSystemDefaultDevice to find a device
    "/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics",
    "/System/Library/Frameworks/Metal.framework/Metal",
};

/// The Objective-C runtime and Metal entry points anvil uses.
struct Api {
  id (*objc_getClass)(const char*);
  SEL (*sel_registerName)(const char*);
  void* objc_msgSend;  // cast to the message's signature at each send
  void* (*objc_autoreleasePoolPush)();
  void (*objc_autoreleasePoolPop)(void*);
  id (*MTLCreateSystemDefaultDevice)();
};

template <typename F>
inline void bind(F& f, void* library, const char* name) {
  void* p = dlsym(library, name);
  if (p == nullptr) throw std::runtime_error(std::string("anvil: Metal: missing symbol ") + name);
  std::memcpy(&f, &p, sizeof f);
}

inline Api load() {
  void* libraries[4] = {};
  for (int i = 0; i < 4; ++i) {
    libraries[i] = dlopen(kLibraries[i], RTLD_NOW | RTLD_LOCAL);
    if (libraries[i] == nullptr) {
      throw std::runtime_error(std::string("anvil: Metal is not available (it needs macOS): cannot load ") +
                               kLibraries[i]);
    }
  }
  Api a{};
  bind(a.objc_getClass, libraries[0], "objc_getClass");
  bind(a.sel_registerName, libraries[0], "sel_registerName");
  bind(a.objc_msgSend, libraries[0], "objc_msgSend");
  bind(a.objc_autoreleasePoolPush, libraries[0], "objc_autoreleasePoolPush");
  bind(a.objc_autoreleasePoolPop, libraries[0], "objc_autoreleasePoolPop");
  bind(a.MTLCreateSystemDefaultDevice, libraries[3], "MTLCreateSystemDefaultDevice");
  return a;
}

/// The entry points, loaded on first use (a failed load throws, and the next use tries again).
inline const Api& api() {
  static const Api instance = load();
  return instance;
}

/// [receiver selector:args...], typed as R(id, SEL, A...).
template <typename R, typename... A>
inline R send(id receiver, const char* selector, A... args) {
  R (*fn)(id, SEL, A...);
  std::memcpy(&fn, &api().objc_msgSend, sizeof fn);
  return fn(receiver, api().sel_registerName(selector), args...);
}

inline id ns_string(const char* text) {
  return send<id>(api().objc_getClass("NSString"), "stringWithUTF8String:", text);
}

inline std::string describe(id error) {
  if (error == nullptr) return "unknown error";
  return send<const char*>(send<id>(error, "localizedDescription"), "UTF8String");
}

inline void release(id object) {
  if (object != nullptr) send<void>(object, "release");
}

/// An autorelease pool for the objects Metal returns autoreleased (command buffers, encoders, strings).
class Pool {
 public:
  Pool() : pool_(api().objc_autoreleasePoolPush()) {}
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  ~Pool() { api().objc_autoreleasePoolPop(pool_); }

 private:
  void* pool_;
};
}  // namespace detail

/// One function's GPU state on the default Metal device: its compiled pipelines, a command queue and one shared
/// buffer holding the intermediates, the captured constants and staging room for the inputs and outputs. Move-only.
class Workspace {
 public:
  /// Compiles `source` (fast math off), makes a pipeline for each of the `count` kernels named `kernels`, and
  /// allocates `nbytes`.
  Workspace(const char* source, const char* const* kernels, std::size_t count, std::size_t nbytes) {
    using detail::id;
    using detail::send;
    detail::Pool pool;
    device_ = detail::api().MTLCreateSystemDefaultDevice();
    if (device_ == nullptr) throw std::runtime_error("anvil: no Metal GPU (MTLCreateSystemDefaultDevice is nil)");
    try {
      queue_ = send<id>(device_, "newCommandQueue");
      if (count > 0) {
        id options = send<id>(send<id>(detail::api().objc_getClass("MTLCompileOptions"), "alloc"), "init");
        send<void>(options, "setFastMathEnabled:", false);
        id error = nullptr;
        id library =
            send<id>(device_, "newLibraryWithSource:options:error:", detail::ns_string(source), options, &error);
        detail::release(options);
        if (library == nullptr) {
          throw std::runtime_error("anvil: Metal could not compile the kernels: " + detail::describe(error));
        }
        for (std::size_t i = 0; i < count; ++i) {
          id function = send<id>(library, "newFunctionWithName:", detail::ns_string(kernels[i]));
          id pipeline = send<id>(device_, "newComputePipelineStateWithFunction:error:", function, &error);
          detail::release(function);
          if (pipeline == nullptr) {
            detail::release(library);
            throw std::runtime_error(std::string("anvil: no Metal pipeline for ") + kernels[i] + ": " +
                                     detail::describe(error));
          }
          pipelines_.push_back(pipeline);
        }
        detail::release(library);
      }
      if (nbytes > 0) {
        buffer_ = send<id>(device_, "newBufferWithLength:options:", static_cast<unsigned long>(nbytes), 0ul);
        if (buffer_ == nullptr) {
          throw std::runtime_error("anvil: Metal could not allocate " + std::to_string(nbytes) + " bytes");
        }
        contents_ = send<char*>(buffer_, "contents");
      }
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

  /// The location `offset` bytes into the buffer.
  DevicePtr at(std::size_t offset) const noexcept { return offset; }
  /// Nothing to do on Metal (CUDA makes its context current).
  void activate() const noexcept {}
  void upload(DevicePtr dst, const void* src, std::size_t n) {
    if (n > 0) std::memcpy(contents_ + dst, src, n);
  }
  void download(void* dst, DevicePtr src, std::size_t n) const {
    if (n > 0) std::memcpy(dst, contents_ + src, n);
  }
  /// Copies on the host once the kernels enqueued so far are done (only outputs that equal other outputs need it).
  void copy(DevicePtr dst, DevicePtr src, std::size_t n) {
    synchronize();
    if (n > 0) std::memcpy(contents_ + dst, contents_ + src, n);
  }
  /// Encodes kernel `kernel` into the current command buffer, one buffer location per parameter.
  template <std::size_t N>
  void launch(std::size_t kernel, Dim3 grid, Dim3 block, const DevicePtr (&args)[N]) {
    using detail::id;
    using detail::send;
    if (encoder_ == nullptr) {
      pool_ = detail::api().objc_autoreleasePoolPush();
      command_ = send<id>(queue_, "commandBuffer");
      encoder_ = send<id>(command_, "computeCommandEncoder");
    }
    send<void>(encoder_, "setComputePipelineState:", pipelines_[kernel]);
    for (std::size_t i = 0; i < N; ++i) {
      send<void>(encoder_, "setBuffer:offset:atIndex:", buffer_, static_cast<unsigned long>(args[i]),
                 static_cast<unsigned long>(i));
    }
    send<void>(encoder_, "dispatchThreadgroups:threadsPerThreadgroup:", detail::MTLSize{grid.x, grid.y, grid.z},
               detail::MTLSize{block.x, block.y, block.z});
  }
  /// Commits the command buffer and waits for it; throws if a kernel failed.
  void synchronize() {
    using detail::id;
    using detail::send;
    if (encoder_ == nullptr) return;
    send<void>(encoder_, "endEncoding");
    send<void>(command_, "commit");
    send<void>(command_, "waitUntilCompleted");
    id error = send<id>(command_, "error");
    const std::string message = error != nullptr ? detail::describe(error) : "";
    encoder_ = command_ = nullptr;
    detail::api().objc_autoreleasePoolPop(std::exchange(pool_, nullptr));
    if (!message.empty()) throw std::runtime_error("anvil: Metal command buffer failed: " + message);
  }

 private:
  void take(Workspace& other) noexcept {
    device_ = std::exchange(other.device_, nullptr);
    queue_ = std::exchange(other.queue_, nullptr);
    buffer_ = std::exchange(other.buffer_, nullptr);
    contents_ = std::exchange(other.contents_, nullptr);
    pipelines_ = std::move(other.pipelines_);
    command_ = std::exchange(other.command_, nullptr);
    encoder_ = std::exchange(other.encoder_, nullptr);
    pool_ = std::exchange(other.pool_, nullptr);
  }
  void release() noexcept {
    if (device_ == nullptr) return;
    for (detail::id pipeline : pipelines_) detail::release(pipeline);
    pipelines_.clear();
    detail::release(buffer_);
    detail::release(queue_);
    detail::release(device_);
    device_ = queue_ = buffer_ = nullptr;
    contents_ = nullptr;
  }

  detail::id device_ = nullptr;
  detail::id queue_ = nullptr;
  detail::id buffer_ = nullptr;
  char* contents_ = nullptr;
  std::vector<detail::id> pipelines_;
  detail::id command_ = nullptr;
  detail::id encoder_ = nullptr;
  void* pool_ = nullptr;
};

}  // namespace metal
}  // namespace anvil
#endif  // ANVIL_METAL_HPP
