// anvil JIT support: what every library the Python JIT loads with ctypes shares (inlined into its jit.cpp).
//
// Each generated function `ns` exports its workspace's lifecycle as
//   const char* anvil_<ns>_ws_new(const char* config, void** ws)   null on success, else the C++ error
//   void anvil_<ns>_ws_free(void* ws)
// (ANVIL_WORKSPACE_ENTRY_POINTS), which anvil.codegen.native.NativeHandle drives; a C++ exception never crosses
// into Python.
#ifndef ANVIL_JIT_HPP
#define ANVIL_JIT_HPP
#include <cstring>
#include <exception>
#include <new>

#if defined(_WIN32)
#define ANVIL_EXPORT extern "C" __declspec(dllexport)
#else
#define ANVIL_EXPORT extern "C" __attribute__((visibility("default")))
#endif

namespace anvil {
namespace jit {

/// Runs body; null on success, else the message of the exception it threw (valid until the next failure on this
/// thread; at most 1023 characters); an allocation failure is "out of memory (std::bad_alloc)", which the Python side
/// raises as MemoryError. NOTE: no <string>: it made a small function's JIT compile 0.25 -> 0.38 s.
template <typename F>
const char* guarded(F&& body) noexcept {
  static thread_local char error[1024];
  try {
    body();
    return nullptr;
  } catch (const std::bad_alloc&) {
    std::strncpy(error, "out of memory (std::bad_alloc)", sizeof(error) - 1);
  } catch (const std::exception& e) {
    std::strncpy(error, e.what(), sizeof(error) - 1);
  } catch (...) {
    std::strncpy(error, "unknown C++ exception", sizeof(error) - 1);
  }
  error[sizeof(error) - 1] = '\0';
  return error;
}

/// *ws = a new workspace of type W on the heap, prepared in place by init(W&) (a workspace too large for a stack never
/// passes through one): the body of every anvil_<ns>_ws_new.
template <typename W, typename Init>
const char* create(void** ws, Init init) noexcept {
  return guarded([&] {
    W* w = new W;
    init(*w);
    *ws = w;
  });
}

}  // namespace jit
}  // namespace anvil

/// The workspace entry points of the generated function `ns` (its WS_t prepared by ns::init(); config unused).
#define ANVIL_WORKSPACE_ENTRY_POINTS(ns)                                                         \
  ANVIL_EXPORT const char* anvil_##ns##_ws_new(const char*, void** ws) {                         \
    return anvil::jit::create<ns::WS_t>(ws, [](ns::WS_t& w) { ns::init(w); });                 \
  }                                                                                              \
  ANVIL_EXPORT void anvil_##ns##_ws_free(void* ws) { delete static_cast<ns::WS_t*>(ws); }
#endif  // ANVIL_JIT_HPP
