// CRC-64/NVME (the x-amz-checksum-crc64nvme of S3 flexible checksums, the default of current AWS
// SDKs and aws-sdk-cpp): width 64, polynomial 0xad93d23594c93659 (reflected 0x9a6c9329ac4bc9b5),
// init and xorout all ones, reflected in and out; check value of "123456789" 0xae8b14860a799888.
//
// Table-driven, eight bytes a step (slice-by-8): about 2-4 GB/s on one core, against the 0.6 GB/s
// of the pure-JS fallback (@aws-sdk/crc64-nvme) the gateway uses when this module is not built.
// Portable C, no CPU feature needed. Exports crc64nvme(bytes: Uint8Array, previous?: bigint): bigint,
// `previous` being the CRC of the bytes before (0n to start), as crc32c.c does for CRC-32C.
#define NAPI_VERSION 8
#include <node_api.h>
#include "napi-bytes.h"
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static uint64_t table[8][256];

static void build_table(void) {
  const uint64_t poly = 0x9a6c9329ac4bc9b5ULL;
  for (int i = 0; i < 256; i++) {
    uint64_t c = (uint64_t)i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
    table[0][i] = c;
  }
  for (int i = 0; i < 256; i++) {
    for (int t = 1; t < 8; t++) table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
  }
}

static uint64_t crc64nvme(uint64_t previous, const unsigned char *p, size_t n) {
  uint64_t crc = ~previous;
  for (; n > 0 && ((uintptr_t)p & 7) != 0; n--) crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    memcpy(&word, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    word = __builtin_bswap64(word);
#endif
    crc ^= word;
    crc = table[7][crc & 0xff] ^ table[6][(crc >> 8) & 0xff] ^ table[5][(crc >> 16) & 0xff] ^ table[4][(crc >> 24) & 0xff] ^
          table[3][(crc >> 32) & 0xff] ^ table[2][(crc >> 40) & 0xff] ^ table[1][(crc >> 48) & 0xff] ^ table[0][crc >> 56];
  }
  for (; n > 0; n--) crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

static napi_value crc64nvme_js(napi_env env, napi_callback_info info) {
  const char *usage = "crc64nvme(bytes, previous?) takes a Uint8Array and a bigint";
  const unsigned char *data;
  size_t length = 0;
  napi_value given;
  napi_valuetype kind;
  if (!oc_bytes_args(env, info, usage, &data, &length, &given, &kind)) return NULL;
  uint64_t previous = 0;
  bool lossless = false;
  if (kind != napi_undefined && (kind != napi_bigint || napi_get_value_bigint_uint64(env, given, &previous, &lossless) != napi_ok || !lossless)) return oc_fail(env, usage);
  napi_value result;
  napi_create_bigint_uint64(env, crc64nvme(previous, data, length), &result);
  return result;
}

NAPI_MODULE_INIT() {
  // Once per process: every worker thread loads the module, and they share the table.
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, build_table);
  napi_value fn;
  napi_create_function(env, "crc64nvme", NAPI_AUTO_LENGTH, crc64nvme_js, NULL, &fn);
  napi_set_named_property(env, exports, "crc64nvme", fn);
  return exports;
}
