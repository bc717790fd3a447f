// Bare-metal start-up for the Arm MPS2 boards QEMU emulates (Cortex-M7 AN500, Cortex-M4F AN386), enough to run a
// generated controller: the vector table, the reset handler (enable the FPU, copy .data, zero .bss, paint the stack,
// run the static constructors, call main, report the deepest stack it used) and ARM semihosting for output and exit.
// No C library start-up, no heap: malloc, operator new and exceptions are never linked in.
#include <cstdint>

extern "C" {
extern std::uint32_t __data_load, __data_start, __data_end, __bss_start, __bss_end, __stack_bottom, __stack_top;
extern void (*__init_array_start[])(), (*__init_array_end[])();
int main();
void reset_handler();
void fault_handler();
}

namespace {
constexpr std::uint32_t paint = 0xA5A5A5A5u;

/// One semihosting call (operation, parameter) through the debug monitor: QEMU's -semihosting answers it.
int semihost(int operation, const void* parameter) {
  register int r0 asm("r0") = operation;
  register const void* r1 asm("r1") = parameter;
  asm volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}
}  // namespace

namespace embedded {
/// Writes a NUL-terminated string to the host's console.
void write(const char* text) { semihost(0x04, text); }  // SYS_WRITE0

/// Writes "name <decimal>\n".
void write_number(const char* name, std::uint32_t value) {
  char line[48], digits[12];
  int n = 0, d = 0;
  while (*name != '\0' && n < 32) line[n++] = *name++;
  line[n++] = ' ';
  do digits[d++] = static_cast<char>('0' + value % 10); while ((value /= 10) != 0);
  while (d > 0) line[n++] = digits[--d];
  line[n++] = '\n';
  line[n] = '\0';
  write(line);
}

/// Ends the program: QEMU exits with 0 (success) or 1.
[[noreturn]] void exit(bool success) {
  const std::uintptr_t reason = success ? 0x20026 : 0x20023;  // ADP_Stopped_ApplicationExit / RunTimeErrorUnknown
  semihost(0x18, reinterpret_cast<const void*>(reason));       // SYS_EXIT
  for (;;) {
  }
}
}  // namespace embedded

extern "C" void reset_handler() {
#if defined(__ARM_FP)
  // CPACR: full access to the coprocessors CP10 and CP11 (the FPU), before the first floating-point instruction
  *reinterpret_cast<volatile std::uint32_t*>(0xE000ED88) |= 0xFu << 20;
  asm volatile("dsb\n isb" ::: "memory");
#endif
  for (std::uint32_t *from = &__data_load, *to = &__data_start; to < &__data_end;) *to++ = *from++;
  for (std::uint32_t* to = &__bss_start; to < &__bss_end;) *to++ = 0;
  // the stack below this frame, painted: the first word main's calls overwrote marks the deepest they went
  const std::uintptr_t frame = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)) - 64;
  volatile std::uint32_t* const bottom = &__stack_bottom;
  for (volatile std::uint32_t* at = bottom; reinterpret_cast<std::uintptr_t>(at) < frame; ++at) *at = paint;
  for (auto constructor = __init_array_start; constructor < __init_array_end; ++constructor) (*constructor)();
  const int status = main();
  volatile std::uint32_t* at = bottom;
  while (*at == paint) ++at;
  embedded::write_number("stack", static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(&__stack_top) -
                                                            reinterpret_cast<std::uintptr_t>(at)));
  embedded::exit(status == 0);
}

extern "C" void fault_handler() {
  embedded::write("fault: hard fault, bus fault or usage fault\n");
  embedded::exit(false);
}

/// The vector table: the initial stack pointer, then the reset and fault handlers (the rest unused).
__attribute__((section(".vectors"), used)) void (*const vector_table[16])() = {
  reinterpret_cast<void (*)()>(&__stack_top), reset_handler, fault_handler, fault_handler, fault_handler,
  fault_handler, fault_handler};
