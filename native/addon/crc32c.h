// CRC32C (Castagnoli) with the x86 SSE4.2 instruction, three streams at once.
#ifndef STRATA_CRC32C_H
#define STRATA_CRC32C_H
#include <stddef.h>
#include <stdint.h>

// 1 when this CPU has the CRC32 instruction (then crc32c_hw may be called); builds its tables once.
int crc32c_hw_init(void);
// CRC32C of p[0..n) continuing a stream whose CRC so far is `initial` (0 for a new one).
uint32_t crc32c_hw(uint32_t initial, const uint8_t *p, size_t n);

#endif
