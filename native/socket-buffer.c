/*
 * setReceiveBuffer(fd, bytes): SO_RCVBUF on a connected TCP socket, returning the size the kernel
 * granted (Linux doubles the request for its bookkeeping). Node has no API for it on TCP sockets,
 * and without it a paused response's socket grows its receive buffer up to net.ipv4.tcp_rmem's
 * maximum (32 MiB here): streamed chunk reads hold hundreds of paused responses (README, The
 * layerwise GET: Streamed reads). Setting it also turns off the kernel's receive-buffer
 * autotuning for that socket, which is the point. Node-API only, so one build serves every Node
 * version; built by scripts/build-native.mjs.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <node_api.h>

static napi_value fail(napi_env env, const char *message) {
  napi_throw_error(env, "OC_ERR_INTERNAL", message);
  return NULL;
}

static napi_value set_receive_buffer(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 2) return fail(env, "setReceiveBuffer(fd, bytes) takes two numbers");
  int32_t fd = -1, bytes = 0;
  if (napi_get_value_int32(env, argv[0], &fd) != napi_ok || napi_get_value_int32(env, argv[1], &bytes) != napi_ok || fd < 0 || bytes <= 0) return fail(env, "setReceiveBuffer(fd, bytes) takes a descriptor and a positive size");
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes) != 0) return fail(env, strerror(errno));
  int granted = 0;
  socklen_t length = sizeof granted;
  if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &granted, &length) != 0) return fail(env, strerror(errno));
  napi_value result;
  napi_create_int32(env, granted, &result);
  return result;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  napi_create_function(env, "setReceiveBuffer", NAPI_AUTO_LENGTH, set_receive_buffer, NULL, &fn);
  napi_set_named_property(env, exports, "setReceiveBuffer", fn);
  return exports;
}
