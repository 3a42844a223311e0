// CRC32C with the SSE4.2 CRC32 instruction. One instruction has a latency of
// three cycles on Intel but the CPU can start one per cycle, so a single
// dependent chain runs at a third of the possible speed (the @node-rs/crc32
// package measured 3.1 GiB/s on the benchmark VM, three streams 17 GiB/s).
// AMD's recent cores (the 2-vCPU EPYC benchmark host) need more chains in
// flight: three streams ran at 6-10 GB/s there and six at 11-19 GB/s, and
// CRC32C was 12% of a batch API reader's CPU samples. The input is cut into
// six (then three) adjacent blocks whose CRCs run interleaved, each from a
// zero register; the partial CRCs are then joined by "shifting" one over the
// length of the next. The raw register update is linear over GF(2), so
// feeding L zero bytes is a fixed 32x32 bit matrix, applied here through
// four 256-entry tables built once at start-up.
#include "crc32c.h"
#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>

#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

static uint32_t shift_long[4][256];
static uint32_t shift_short[4][256];
static int ready;

__attribute__((target("sse4.2"))) static uint32_t feed_zeros(uint32_t reg, size_t n) {
  uint64_t r = reg;
  for (size_t i = 0; i < n / 8; i++) r = _mm_crc32_u64(r, 0);
  return (uint32_t)r;
}

// table[k][b] = the register after n zero bytes, starting from byte b at position k
__attribute__((target("sse4.2"))) static void build_shift(uint32_t table[4][256], size_t n) {
  uint32_t image[32];
  for (int i = 0; i < 32; i++) image[i] = feed_zeros(1u << i, n);
  for (int k = 0; k < 4; k++) {
    for (int b = 0; b < 256; b++) {
      uint32_t v = 0;
      for (int bit = 0; bit < 8; bit++) {
        if (b & (1 << bit)) v ^= image[8 * k + bit];
      }
      table[k][b] = v;
    }
  }
}

static inline uint32_t shift(uint32_t table[4][256], uint32_t reg) {
  return table[0][reg & 0xff] ^ table[1][(reg >> 8) & 0xff] ^ table[2][(reg >> 16) & 0xff] ^ table[3][reg >> 24];
}

int crc32c_hw_init(void) {
  if (ready) return 1;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("sse4.2")) return 0;
  build_shift(shift_long, LONG_BLOCK);
  build_shift(shift_short, SHORT_BLOCK);
  ready = 1;
  return 1;
}

static inline uint64_t load64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

// Three interleaved streams over blocks of `block` bytes while 3 blocks remain.
#define THREE_WAY(block, table)                                                                     \
  while (n >= 3 * (block)) {                                                                      \
    uint64_t c1 = 0, c2 = 0;                                                                      \
    const uint8_t *end = p + (block);                                                             \
    do {                                                                                          \
      c0 = _mm_crc32_u64(c0, load64(p));                                                          \
      c1 = _mm_crc32_u64(c1, load64(p + (block)));                                                \
      c2 = _mm_crc32_u64(c2, load64(p + 2 * (block)));                                            \
      p += 8;                                                                                     \
    } while (p < end);                                                                            \
    c0 = shift(table, (uint32_t)c0) ^ (uint32_t)c1;                                               \
    c0 = shift(table, (uint32_t)c0) ^ (uint32_t)c2;                                               \
    p += 2 * (block);                                                                             \
    n -= 3 * (block);                                                                             \
  }

// The same with six streams (AMD Zen keeps more CRC32 instructions in flight than three chains supply).
#define SIX_WAY(block, table)                                                                       \
  while (n >= 6 * (block)) {                                                                      \
    uint64_t c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0;                                              \
    const uint8_t *end = p + (block);                                                             \
    do {                                                                                          \
      c0 = _mm_crc32_u64(c0, load64(p));                                                          \
      c1 = _mm_crc32_u64(c1, load64(p + (block)));                                                \
      c2 = _mm_crc32_u64(c2, load64(p + 2 * (block)));                                            \
      c3 = _mm_crc32_u64(c3, load64(p + 3 * (block)));                                            \
      c4 = _mm_crc32_u64(c4, load64(p + 4 * (block)));                                            \
      c5 = _mm_crc32_u64(c5, load64(p + 5 * (block)));                                            \
      p += 8;                                                                                     \
    } while (p < end);                                                                            \
    c0 = shift(table, (uint32_t)c0) ^ (uint32_t)c1;                                               \
    c0 = shift(table, (uint32_t)c0) ^ (uint32_t)c2;                                               \
    c0 = shift(table, (uint32_t)c0) ^ (uint32_t)c3;                                               \
    c0 = shift(table, (uint32_t)c0) ^ (uint32_t)c4;                                               \
    c0 = shift(table, (uint32_t)c0) ^ (uint32_t)c5;                                               \
    p += 5 * (block);                                                                             \
    n -= 6 * (block);                                                                             \
  }

__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t initial, const uint8_t *p, size_t n) {
  uint64_t c0 = ~initial;
  while (n > 0 && ((uintptr_t)p & 7) != 0) {
    c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    n--;
  }
  SIX_WAY(LONG_BLOCK, shift_long)
  THREE_WAY(LONG_BLOCK, shift_long)
  THREE_WAY(SHORT_BLOCK, shift_short)
  while (n >= 8) {
    c0 = _mm_crc32_u64(c0, load64(p));
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    n--;
  }
  return ~(uint32_t)c0;
}

#else

int crc32c_hw_init(void) { return 0; }
uint32_t crc32c_hw(uint32_t initial, const uint8_t *p, size_t n) { (void)p; (void)n; return initial; }

#endif
