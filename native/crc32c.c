/*
 * crc32c(bytes, previous?): the CRC-32C (Castagnoli) of a Uint8Array, continuing from `previous`
 * (the CRC of the bytes before it, 0 to start), as @node-rs/crc32's crc32c computes it.
 *
 * Every byte the gateway serves is checksummed once in a read worker, and the TypeScript client
 * checks every byte again. @node-rs/crc32 feeds the CPU's crc32 instruction one dependent stream,
 * so each instruction waits for the one before (about 4.7 GB/s on this project's benchmark
 * machine, a fifth of the gateway's CPU on its embedded store). Here three streams run side by
 * side over three neighbouring blocks of STRIDE bytes and are joined with a table that advances a
 * CRC over STRIDE zero bytes (CRC is linear, so advancing a state past a block and adding the
 * block's own CRC from state 0 gives the CRC of both): about 16 GB/s on the same machine.
 *
 * x86-64 with SSE4.2 only (checked when the module loads); elsewhere the module exports nothing
 * and native/crc32c.ts uses @node-rs/crc32. Node-API only; built by scripts/build-native.mjs.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <node_api.h>
#include "napi-bytes.h"

#if defined(__x86_64__)
#include <nmmintrin.h>

#define STRIDE 8192

/* advance[k][v]: the CRC state byte k of value v becomes after STRIDE zero bytes. */
static uint32_t advance[4][256];

/* The raw state update (no pre- or post-inversion) over n bytes, one stream. */
__attribute__((target("sse4.2"))) static uint32_t run(uint32_t state, const unsigned char *p, size_t n) {
  uint64_t s = state;
  for (; n > 0 && ((uintptr_t)p & 7) != 0; n--) s = _mm_crc32_u8((uint32_t)s, *p++);
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    memcpy(&word, p, 8);
    s = _mm_crc32_u64(s, word);
  }
  for (; n > 0; n--) s = _mm_crc32_u8((uint32_t)s, *p++);
  return (uint32_t)s;
}

static uint32_t skip_block(uint32_t state) {
  return advance[0][state & 0xff] ^ advance[1][(state >> 8) & 0xff] ^ advance[2][(state >> 16) & 0xff] ^ advance[3][state >> 24];
}

__attribute__((target("sse4.2"))) static void build_advance(void) {
  static const unsigned char zeros[STRIDE];
  uint32_t bit[32];
  for (int b = 0; b < 32; b++) bit[b] = run(1u << b, zeros, STRIDE);
  for (int k = 0; k < 4; k++) {
    for (int v = 0; v < 256; v++) {
      uint32_t state = 0;
      for (int b = 0; b < 8; b++) {
        if (v & (1 << b)) state ^= bit[k * 8 + b];
      }
      advance[k][v] = state;
    }
  }
}

__attribute__((target("sse4.2"))) static uint32_t crc32c(uint32_t previous, const unsigned char *p, size_t n) {
  uint64_t a = ~previous;
  for (; n > 0 && ((uintptr_t)p & 7) != 0; n--) a = _mm_crc32_u8((uint32_t)a, *p++);
  for (; n >= 3 * STRIDE; n -= 3 * STRIDE) {
    uint64_t b = 0, c = 0;
    const unsigned char *end = p + STRIDE;
    for (; p < end; p += 8) {
      uint64_t x, y, z;
      memcpy(&x, p, 8);
      memcpy(&y, p + STRIDE, 8);
      memcpy(&z, p + 2 * STRIDE, 8);
      a = _mm_crc32_u64(a, x);
      b = _mm_crc32_u64(b, y);
      c = _mm_crc32_u64(c, z);
    }
    a = skip_block(skip_block((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
    p += 2 * STRIDE;
  }
  return ~run((uint32_t)a, p, n);
}

static napi_value crc32c_js(napi_env env, napi_callback_info info) {
  const unsigned char *data;
  size_t length = 0;
  napi_value given;
  napi_valuetype kind;
  if (!oc_bytes_args(env, info, "crc32c(bytes, previous?) takes a Uint8Array", &data, &length, &given, &kind)) return NULL;
  uint32_t previous = 0;
  if (kind != napi_undefined && (kind != napi_number || napi_get_value_uint32(env, given, &previous) != napi_ok)) return oc_fail(env, "crc32c's previous CRC is a number");
  napi_value result;
  napi_create_uint32(env, crc32c(previous, data, length), &result);
  return result;
}
#endif

NAPI_MODULE_INIT() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("sse4.2")) {
    // Once per process: every worker thread loads the module, and they share the table.
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, build_advance);
    napi_value fn;
    napi_create_function(env, "crc32c", NAPI_AUTO_LENGTH, crc32c_js, NULL, &fn);
    napi_set_named_property(env, exports, "crc32c", fn);
  }
#endif
  return exports;
}
