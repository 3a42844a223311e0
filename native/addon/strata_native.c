// Small N-API addon for the system calls Node does not expose. Policy stays in
// TypeScript; this file only moves arguments across the boundary and reports
// failures as errors whose `code` is the errno name (EPERM, EBUSY, ...), so the
// TS side matches on `code` exactly as it does for Node's own fs errors.
#include <node_api.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>
#include <sys/syscall.h>

static const char *errno_name(int e) {
  switch (e) {
    case EPERM: return "EPERM"; case ENOENT: return "ENOENT"; case EIO: return "EIO";
    case EBUSY: return "EBUSY"; case EINVAL: return "EINVAL"; case ENODEV: return "ENODEV";
    case ENOTDIR: return "ENOTDIR"; case EACCES: return "EACCES"; case ENOMEM: return "ENOMEM";
    case ENOTBLK: return "ENOTBLK"; case ENXIO: return "ENXIO"; case EROFS: return "EROFS";
    case ELOOP: return "ELOOP"; case EMFILE: return "EMFILE"; case ENAMETOOLONG: return "ENAMETOOLONG";
    case EFAULT: return "EFAULT"; case ENOSPC: return "ENOSPC"; case EEXIST: return "EEXIST";
    case ENOSYS: return "ENOSYS"; case EOPNOTSUPP: return "EOPNOTSUPP";
    default: return "EUNKNOWN";
  }
}

static napi_value throw_errno(napi_env env, const char *syscall_name, int e) {
  char msg[256];
  snprintf(msg, sizeof msg, "%s: %s", syscall_name, strerror(e));
  napi_value code, message, err, errnum;
  napi_create_string_utf8(env, errno_name(e), NAPI_AUTO_LENGTH, &code);
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, code, message, &err);
  napi_create_int32(env, -e, &errnum);
  napi_set_named_property(env, err, "errno", errnum);
  napi_value sc;
  napi_create_string_utf8(env, syscall_name, NAPI_AUTO_LENGTH, &sc);
  napi_set_named_property(env, err, "syscall", sc);
  napi_throw(env, err);
  return NULL;
}

// Returns a malloc'd copy of a string argument, or NULL for null/undefined.
static char *opt_string(napi_env env, napi_value v) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t != napi_string) return NULL;
  size_t len = 0;
  napi_get_value_string_utf8(env, v, NULL, 0, &len);
  char *s = malloc(len + 1);
  if (!s) return NULL;
  napi_get_value_string_utf8(env, v, s, len + 1, &len);
  return s;
}

// mount(source, target, fstype, flags, data)
static napi_value js_mount(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 4) { napi_throw_type_error(env, "EINVAL", "mount(source, target, fstype, flags, data?)"); return NULL; }
  char *source = opt_string(env, argv[0]);
  char *target = opt_string(env, argv[1]);
  char *fstype = opt_string(env, argv[2]);
  double flags_d = 0;
  napi_get_value_double(env, argv[3], &flags_d);
  char *data = argc > 4 ? opt_string(env, argv[4]) : NULL;
  if (!target) { free(source); free(fstype); free(data); napi_throw_type_error(env, "EINVAL", "target must be a string"); return NULL; }
  int rc = mount(source, target, fstype, (unsigned long)flags_d, data);
  int e = errno;
  free(source); free(target); free(fstype); free(data);
  if (rc != 0) return throw_errno(env, "mount", e);
  return NULL;
}

// umount2(target, flags)
static napi_value js_umount2(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  char *target = argc > 0 ? opt_string(env, argv[0]) : NULL;
  if (!target) { napi_throw_type_error(env, "EINVAL", "umount2(target, flags)"); return NULL; }
  int32_t flags = 0;
  if (argc > 1) napi_get_value_int32(env, argv[1], &flags);
  int rc = umount2(target, flags);
  int e = errno;
  free(target);
  if (rc != 0) return throw_errno(env, "umount2", e);
  return NULL;
}

// gettid(): the kernel thread id, used in diagnostics of helper processes.
static napi_value js_gettid(napi_env env, napi_callback_info info) {
  napi_value r;
  napi_create_int32(env, (int32_t)syscall(SYS_gettid), &r);
  return r;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    {"mount", NULL, js_mount, NULL, NULL, NULL, napi_default, NULL},
    {"umount2", NULL, js_umount2, NULL, NULL, NULL, napi_default, NULL},
    {"gettid", NULL, js_gettid, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
