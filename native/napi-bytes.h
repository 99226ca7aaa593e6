// What the checksum modules (crc32c.c, crc64nvme.c) share: reading their (bytes, previous?)
// arguments and failing with a TypeError that names the call. Static inline functions: each module
// gets its own copy, nothing is exported.
#ifndef OBJECTCACHE_NAPI_BYTES_H
#define OBJECTCACHE_NAPI_BYTES_H

#include <node_api.h>
#include <stdbool.h>
#include <stddef.h>

static inline napi_value oc_fail(napi_env env, const char *message) {
  napi_throw_type_error(env, "OC_ERR_INTERNAL", message);
  return NULL;
}

// The call's Uint8Array (argv[0]) and its optional second argument (undefined or null when
// absent). False, with a TypeError thrown, when the first is not a Uint8Array.
static inline bool oc_bytes_args(napi_env env, napi_callback_info info, const char *usage, const unsigned char **data, size_t *length, napi_value *previous, napi_valuetype *previous_kind) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1) return oc_fail(env, usage), false;
  bool is_typed = false;
  napi_typedarray_type type;
  void *bytes = NULL;
  if (napi_is_typedarray(env, argv[0], &is_typed) != napi_ok || !is_typed ||
      napi_get_typedarray_info(env, argv[0], &type, length, &bytes, NULL, NULL) != napi_ok || type != napi_uint8_array) {
    return oc_fail(env, usage), false;
  }
  *data = (const unsigned char *)bytes;
  *previous = argc > 1 ? argv[1] : NULL;
  *previous_kind = napi_undefined;
  if (argc > 1 && napi_typeof(env, argv[1], previous_kind) != napi_ok) return oc_fail(env, usage), false;
  if (*previous_kind == napi_null) *previous_kind = napi_undefined;
  return true;
}

#endif
