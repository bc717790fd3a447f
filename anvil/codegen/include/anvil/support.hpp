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
#if !defined(ANVIL_NOW) && !defined(ANVIL_NO_CLOCK)
#include <chrono>
#endif

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
// ANVIL_STRAIGHT_LINE_PART: such a chunk defined in a translation unit of its own (a JIT build compiles a large
// program's chunks side by side), so of external linkage.
// ANVIL_COLUMN_LOOPS: vector forward mode's loops over a Jacobian's columns (anvil.ad.vector_mode), a function of its
// own at the build's level (its loops vectorize from -O2 on); ANVIL_COLUMN_LOOPS_PART: one in a unit of its own.
#if defined(__GNUC__) || defined(__clang__)
#define ANVIL_COLUMN_LOOPS_PART __attribute__((noinline))
#else
#define ANVIL_COLUMN_LOOPS_PART
#endif
#define ANVIL_COLUMN_LOOPS ANVIL_KERNEL_OUTLINED
#if defined(__GNUC__) && !defined(__clang__)
// With ANVIL_FMA (fused multiply-adds: anvil.codegen.jit.FMA_FLAGS), -O1 plus expensive optimizations: g++ fuses
// multiply-adds in a pass that runs only with them, so at plain -O1 a chunk would get none.
#ifdef ANVIL_FMA
#define ANVIL_STRAIGHT_LINE_LEVEL optimize("O1", "expensive-optimizations")
#else
#define ANVIL_STRAIGHT_LINE_LEVEL optimize("O1")
#endif
#define ANVIL_STRAIGHT_LINE static __attribute__((noinline, ANVIL_STRAIGHT_LINE_LEVEL))
#define ANVIL_STRAIGHT_LINE_PART __attribute__((noinline, ANVIL_STRAIGHT_LINE_LEVEL))
#elif defined(__clang__)
#define ANVIL_STRAIGHT_LINE ANVIL_KERNEL_OUTLINED
#define ANVIL_STRAIGHT_LINE_PART __attribute__((noinline))
#else
#define ANVIL_STRAIGHT_LINE ANVIL_KERNEL_OUTLINED
#define ANVIL_STRAIGHT_LINE_PART
#endif

namespace anvil {

/// Alignment of every buffer and workspace region, in bytes.
inline constexpr std::size_t kAlignment = 64;

/// A setting tied to the precision of the arithmetic (a pivot, a regularization, a tolerance floor): `for_double`
/// where the solver computes in double, `for_float` where it computes in float (a float32 controller).
template <class T>
constexpr T by_precision(double for_double, float for_float) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, float>, "anvil computes in double or float");
  if constexpr (std::is_same_v<T, float>) {
    return for_float;
  } else {
    return for_double;
  }
}

/// The type of a parameter that takes part in no template argument deduction (as C++20's std::type_identity_t).
template <class T>
struct type_identity {
  using type = T;
};
template <class T>
using same_t = typename type_identity<T>::type;

/// A running maximum a (never NaN) updated with b: b where it is larger, else a, so a NaN b leaves a, as std::fmax(a,
/// b) would. Inline code where std::fmax is a libm call (x86 without -ffinite-math-only: 4% of a quadrotor MPC's
/// time, in the interior point's norms and step lengths).
template <class T>
inline T running_max(T a, same_t<T> b) {
  return b > a ? b : a;
}

/// A running minimum, likewise (std::fmin's result where a is not NaN).
template <class T>
inline T running_min(T a, same_t<T> b) {
  return b < a ? b : a;
}

// The clock of solve times and time limits, seconds from any origin. A target without std::chrono's steady clock (a
// microcontroller) defines ANVIL_NOW() as an expression of its own clock in seconds (a double: a cycle counter over
// the core's frequency, say), or ANVIL_NO_CLOCK to compile timing out: then every solve time reads 0 and max_time
// never stops a solve (anvil::has_clock is false).
#if defined(ANVIL_NOW)
inline constexpr bool has_clock = true;
inline double now() { return static_cast<double>(ANVIL_NOW()); }
#elif defined(ANVIL_NO_CLOCK)
inline constexpr bool has_clock = false;
inline double now() { return 0.0; }
#else
inline constexpr bool has_clock = true;
inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
#endif

/// Whether the clock has passed `deadline` (an anvil::now() reading; 0: no deadline, never passed).
inline bool expired(double deadline) { return has_clock && deadline > 0.0 && now() >= deadline; }

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

/// The unsigned type integers of type T wrap in: T's unsigned counterpart, at least as wide as int (narrower types
/// would be promoted back to int, where overflow is undefined).
template <typename T>
using wrapping_t = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

/// Integer a + b, a - b, a * b, -a and a << b modulo 2^bits, as numpy computes them, where C++ leaves signed overflow
/// (and shifting a negative value) undefined: the unsigned operation, converted back. A shift by a negative count or
/// by T's width or more gives 0 (numpy's). Generated code calls them only where an operation may overflow; index
/// arithmetic keeps the operators.
template <typename T>
constexpr T wrap_add(T a, T b) noexcept {
  return static_cast<T>(static_cast<wrapping_t<T>>(a) + static_cast<wrapping_t<T>>(b));
}
template <typename T>
constexpr T wrap_sub(T a, T b) noexcept {
  return static_cast<T>(static_cast<wrapping_t<T>>(a) - static_cast<wrapping_t<T>>(b));
}
template <typename T>
constexpr T wrap_mul(T a, T b) noexcept {
  return static_cast<T>(static_cast<wrapping_t<T>>(a) * static_cast<wrapping_t<T>>(b));
}
template <typename T>
constexpr T wrap_neg(T a) noexcept {
  return static_cast<T>(wrapping_t<T>(0) - static_cast<wrapping_t<T>>(a));
}
template <typename T>
constexpr T wrap_shl(T a, T b) noexcept {
  if constexpr (std::is_signed<T>::value) {
    if (b < T(0)) return T(0);
  }
  return b >= T(8 * sizeof(T)) ? T(0) : static_cast<T>(static_cast<wrapping_t<T>>(a) << b);
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
/// that is never freed (this is how the Python JIT passes numpy arrays without copying, and how a microcontroller
/// passes its static arrays: a program that only makes views never references operator new or delete). Its pointer
/// is `data()`, or `data` where a pointer is expected.
template <typename T, std::size_t... Dims>
class Buffer {
 public:
  using value_type = T;
  static constexpr std::size_t rank = sizeof...(Dims);
  static constexpr std::size_t size = (std::size_t{1} * ... * Dims);
  static constexpr std::size_t nbytes = size * sizeof(T);
  static constexpr std::array<std::size_t, sizeof...(Dims)> shape{{Dims...}};

  Buffer() : data(nullptr), release_(nullptr) { allocate(); }
  explicit Buffer(T* external) noexcept : data(external), release_(nullptr) {}
  Buffer(const Buffer& other) : Buffer() { copy_from(other); }
  Buffer(Buffer&& other) noexcept : data(other.data.pointer_), release_(other.release_) {
    other.release_ = nullptr;
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
      release_ = other.release_;
      other.data.pointer_ = nullptr;
      other.release_ = nullptr;
    }
    return *this;
  }
  ~Buffer() { release(); }

  // NOTE: any integral index (an int loop counter too) without a sign conversion (clang's -Wconversion)
  template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  T& operator[](I i) noexcept { return data.pointer_[i]; }
  template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  const T& operator[](I i) const noexcept { return data.pointer_[i]; }
  T* begin() noexcept { return data.pointer_; }
  T* end() noexcept { return data.pointer_ + size; }
  const T* begin() const noexcept { return data.pointer_; }
  const T* end() const noexcept { return data.pointer_ + size; }
  bool owns_memory() const noexcept { return release_ != nullptr; }

  /// The elements: `data()` or `data` (see DataPointer).
  DataPointer<T> data;

 private:
  static void free_aligned(void* p) noexcept { ::operator delete(p, std::align_val_t{kAlignment}); }

  /// Owns new zeroed memory; only the constructors that own memory instantiate this (and reference operator new).
  void allocate() {
    if constexpr (size != 0) {
      void* p = ::operator new(nbytes, std::align_val_t{kAlignment});
      std::memset(p, 0, nbytes);
      data.pointer_ = static_cast<T*>(p);
      release_ = free_aligned;
    }
  }
  void release() noexcept {
    if (release_ != nullptr) release_(data.pointer_);
    data.pointer_ = nullptr;
    release_ = nullptr;
  }
  void copy_from(const Buffer& other) {
    if (data.pointer_ == nullptr) allocate();
    if constexpr (size != 0) {
      std::memcpy(static_cast<void*>(data.pointer_), static_cast<const void*>(other.data.pointer_), nbytes);
    }
  }

  void (*release_)(void*) noexcept;  ///< frees owned memory (null for a view)
};

/// Fixed-size storage inside its owner, for workspaces: Array<double, 3> is 3 doubles held in place, 64-byte aligned,
/// never on the heap, so a workspace of Arrays is one plain struct that may be static, on a stack or in caller memory.
/// Its pointer is `data()`, as a Buffer's.
template <typename T, std::size_t N>
struct Array {
  using value_type = T;
  static constexpr std::size_t size = N;
  static constexpr std::size_t nbytes = N * sizeof(T);

  T* data() noexcept { return elements; }
  const T* data() const noexcept { return elements; }
  template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  T& operator[](I i) noexcept { return elements[i]; }
  template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  const T& operator[](I i) const noexcept { return elements[i]; }
  T* begin() noexcept { return elements; }
  T* end() noexcept { return elements + N; }
  const T* begin() const noexcept { return elements; }
  const T* end() const noexcept { return elements + N; }

  alignas(kAlignment) T elements[N > 0 ? N : 1];  ///< (one element when N is 0: C++ has no empty arrays)
};

/// Zeroes a workspace in place (every generated workspace is a plain struct whose all-zero state is its initial one):
/// the body of every generated `init(ws)`; allocates nothing and needs no stack beyond its own frame.
template <typename W>
void zero(W& ws) noexcept {
  static_assert(std::is_trivially_copyable<W>::value, "a workspace is a plain struct of arrays and numbers");
  std::memset(static_cast<void*>(&ws), 0, sizeof(W));
}

/// A workspace prepared by `init`, by value: the body of every generated `init_ws()`.
template <typename W>
W prepared(void (*init)(W&)) {
  W ws;
  init(ws);
  return ws;
}

}  // namespace anvil

/// The definitions of a generated namespace's `init(ws)` (zeroes the workspace where it lies) and `init_ws()` (one
/// prepared, by value).
#define ANVIL_WORKSPACE_INIT                     \
  void init(WS_t& ws) { anvil::zero(ws); }       \
  WS_t init_ws() { return anvil::prepared(init); }
#endif  // ANVIL_SUPPORT_HPP
