// anvil support code: inlined once into every generated module (the include guard keeps it once per translation unit).
#ifndef ANVIL_SUPPORT_HPP
#define ANVIL_SUPPORT_HPP
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

// ANVIL_KERNEL: a kernel inlined into its function's call(); ANVIL_KERNEL_OUTLINED: one kept a function of its own
// (large programs: the compiler's time on one huge call() grows faster than its size).
#if defined(__GNUC__) || defined(__clang__)
#define ANVIL_RESTRICT __restrict__
#define ANVIL_KERNEL static inline __attribute__((always_inline))
#define ANVIL_KERNEL_OUTLINED static __attribute__((noinline))
#elif defined(_MSC_VER)
#define ANVIL_RESTRICT __restrict
#define ANVIL_KERNEL static __forceinline
#define ANVIL_KERNEL_OUTLINED static __declspec(noinline)
#else
#define ANVIL_RESTRICT
#define ANVIL_KERNEL static inline
#define ANVIL_KERNEL_OUTLINED static
#endif
// ANVIL_STRAIGHT_LINE: a chunk of straight-line code (anvil.codegen.straight_line), a function of its own that g++
// optimizes at -O1 whatever the build's level: a swing-up's Lagrangian Hessian (40 chunks) compiles in 18 s instead of
// 30 s at -O3 and runs as fast (80 us); other compilers use the build's level.
#if defined(__GNUC__) && !defined(__clang__)
#define ANVIL_STRAIGHT_LINE static __attribute__((noinline, optimize("O1")))
#else
#define ANVIL_STRAIGHT_LINE ANVIL_KERNEL_OUTLINED
#endif

namespace anvil {

/// Alignment of every buffer and workspace region, in bytes.
inline constexpr std::size_t kAlignment = 64;

/// Reinterprets the bits of `from` as a `To` (std::bit_cast is C++20).
template <typename To, typename From>
inline To bit_cast(const From& from) noexcept {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs equal sizes");
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}

/// Integer a / b truncated toward zero, as C++ divides, and defined where C++ is not (numpy's results, no trap):
/// a / 0 == 0, and the most negative value divided by -1 wraps to itself. Generated code calls it only where the
/// divisor may be 0 or -1; division by any other constant keeps the operator.
template <typename T>
constexpr T cdiv(T a, T b) noexcept {
  static_assert(std::is_integral<T>::value, "cdiv divides integers");
  if (b == T(0)) return T(0);
  if constexpr (std::is_signed<T>::value) {
    using U = std::make_unsigned_t<T>;
    if (b == T(-1)) return static_cast<T>(U(0) - static_cast<U>(a));
  }
  return static_cast<T>(a / b);
}

/// Integer a % b, as C++ takes it (the sign of a), defined where C++ is not: a % 0 == 0 and a % -1 == 0 (numpy's).
template <typename T>
constexpr T cmod(T a, T b) noexcept {
  static_assert(std::is_integral<T>::value, "cmod divides integers");
  if constexpr (std::is_signed<T>::value) {
    if (b == T(-1)) return T(0);
  }
  return b == T(0) ? T(0) : static_cast<T>(a % b);
}

/// The pointer of a Buffer, spelled either way: `b.data()` (a call) or `b.data` (converts to the pointer), as the API
/// reference's examples write it (`Eigen::Map<const SpMat> J(..., out.data)`). A const Buffer gives const pointers.
template <typename T>
class DataPointer {
 public:
  explicit DataPointer(T* pointer) noexcept : pointer_(pointer) {}
  T* operator()() noexcept { return pointer_; }
  const T* operator()() const noexcept { return pointer_; }
  operator T*() noexcept { return pointer_; }
  operator const T*() const noexcept { return pointer_; }

 private:
  template <typename, std::size_t...>
  friend class Buffer;
  T* pointer_;
};

/// A dense C-order array whose shape is part of its type: Buffer<double, 3, 4> holds 12 doubles, Buffer<double> one.
/// A default-constructed Buffer owns zeroed, 64-byte aligned memory; Buffer(pointer) is a view over caller memory
/// that is never freed (this is how the Python JIT passes numpy arrays without copying). Its pointer is `data()`, or
/// `data` where a pointer is expected.
template <typename T, std::size_t... Dims>
class Buffer {
 public:
  using value_type = T;
  static constexpr std::size_t rank = sizeof...(Dims);
  static constexpr std::size_t size = (std::size_t{1} * ... * Dims);
  static constexpr std::size_t nbytes = size * sizeof(T);
  static constexpr std::array<std::size_t, sizeof...(Dims)> shape{{Dims...}};

  Buffer() : data(allocate()), owned_(true) {}
  explicit Buffer(T* external) noexcept : data(external), owned_(false) {}
  Buffer(const Buffer& other) : Buffer() { copy_from(other); }
  Buffer(Buffer&& other) noexcept : data(other.data.pointer_), owned_(other.owned_) {
    other.owned_ = false;
    other.data.pointer_ = nullptr;
  }
  Buffer& operator=(const Buffer& other) {
    if (this != &other) copy_from(other);
    return *this;
  }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      release();
      data.pointer_ = other.data.pointer_;
      owned_ = other.owned_;
      other.data.pointer_ = nullptr;
      other.owned_ = false;
    }
    return *this;
  }
  ~Buffer() { release(); }

  T& operator[](std::size_t i) noexcept { return data.pointer_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data.pointer_[i]; }
  T* begin() noexcept { return data.pointer_; }
  T* end() noexcept { return data.pointer_ + size; }
  const T* begin() const noexcept { return data.pointer_; }
  const T* end() const noexcept { return data.pointer_ + size; }
  bool owns_memory() const noexcept { return owned_; }

  /// The elements: `data()` or `data` (see DataPointer).
  DataPointer<T> data;

 private:
  static T* allocate() {
    if constexpr (size == 0) {
      return nullptr;
    } else {
      void* p = ::operator new(nbytes, std::align_val_t{kAlignment});
      std::memset(p, 0, nbytes);
      return static_cast<T*>(p);
    }
  }
  void release() noexcept {
    if (owned_ && data.pointer_ != nullptr) {
      ::operator delete(static_cast<void*>(data.pointer_), std::align_val_t{kAlignment});
    }
    data.pointer_ = nullptr;
    owned_ = false;
  }
  void copy_from(const Buffer& other) {
    if (data.pointer_ == nullptr && size != 0) {
      data.pointer_ = allocate();
      owned_ = true;
    }
    if constexpr (size != 0) {
      std::memcpy(static_cast<void*>(data.pointer_), static_cast<const void*>(other.data.pointer_), nbytes);
    }
  }

  bool owned_;
};

}  // namespace anvil
#endif  // ANVIL_SUPPORT_HPP
