// anvil JIT support: what every library the Python JIT loads with ctypes shares (inlined into its jit.cpp).
//
// Each generated function `ns` exports its workspace's lifecycle as
//   const char* anvil_<ns>_ws_new(const char* config, void** ws)   null on success, else the C++ error
//   void anvil_<ns>_ws_free(void* ws)
// (ANVIL_WORKSPACE_ENTRY_POINTS), which anvil.codegen.native.NativeHandle drives; a C++ exception never crosses
// into Python.
#ifndef ANVIL_JIT_HPP
#define ANVIL_JIT_HPP
#include <exception>
#include <string>

#if defined(_WIN32)
#define ANVIL_EXPORT extern "C" __declspec(dllexport)
#else
#define ANVIL_EXPORT extern "C" __attribute__((visibility("default")))
#endif

namespace anvil {
namespace jit {

/// Runs body; null on success, else the message of the exception it threw (valid until the next failure on this
/// thread).
template <typename F>
const char* guarded(F&& body) noexcept {
  static thread_local std::string error;
  try {
    body();
    return nullptr;
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown C++ exception";
  }
  return error.c_str();
}

/// *ws = a new workspace of type W made by init(): the body of every anvil_<ns>_ws_new.
template <typename W, typename Init>
const char* create(void** ws, Init init) noexcept {
  return guarded([&] { *ws = new W(init()); });
}

}  // namespace jit
}  // namespace anvil

/// The workspace entry points of the generated function `ns` (its WS_t made by ns::init_ws(); config unused).
#define ANVIL_WORKSPACE_ENTRY_POINTS(ns)                                                         \
  ANVIL_EXPORT const char* anvil_##ns##_ws_new(const char*, void** ws) {                         \
    return anvil::jit::create<ns::WS_t>(ws, ns::init_ws);                                        \
  }                                                                                              \
  ANVIL_EXPORT void anvil_##ns##_ws_free(void* ws) { delete static_cast<ns::WS_t*>(ws); }
#endif  // ANVIL_JIT_HPP
