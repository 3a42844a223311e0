// Small N-API addon for the system calls Node does not expose (mount family,
// mknod, l*xattr, utimensat with nanoseconds, flock). Policy stays in
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
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <sys/file.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>
#include "crc32c.h"
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/ioctl.h>
#include <linux/fs.h>
#include <linux/fiemap.h>
#include <uv.h>

static const char *errno_name(int e) {
  switch (e) {
    case EPERM: return "EPERM"; case ENOENT: return "ENOENT"; case EIO: return "EIO";
    case EBUSY: return "EBUSY"; case EINVAL: return "EINVAL"; case ENODEV: return "ENODEV";
    case ENOTDIR: return "ENOTDIR"; case EACCES: return "EACCES"; case ENOMEM: return "ENOMEM";
    case ENOTBLK: return "ENOTBLK"; case ENXIO: return "ENXIO"; case EROFS: return "EROFS";
    case ELOOP: return "ELOOP"; case EMFILE: return "EMFILE"; case ENAMETOOLONG: return "ENAMETOOLONG";
    case EFAULT: return "EFAULT"; case ENOSPC: return "ENOSPC"; case EEXIST: return "EEXIST";
    case ENOSYS: return "ENOSYS"; case EOPNOTSUPP: return "EOPNOTSUPP";
    case ENODATA: return "ENODATA"; case E2BIG: return "E2BIG"; case ERANGE: return "ERANGE";
    case EDQUOT: return "EDQUOT"; case EBADF: return "EBADF"; case ENOTEMPTY: return "ENOTEMPTY";
    case EISDIR: return "EISDIR"; case EXDEV: return "EXDEV"; case EMLINK: return "EMLINK";
    case EADDRINUSE: return "EADDRINUSE"; case ENOTSOCK: return "ENOTSOCK"; case ENFILE: return "ENFILE";
    case EPIPE: return "EPIPE"; case ECONNRESET: return "ECONNRESET"; case ETIMEDOUT: return "ETIMEDOUT";
    case ENOTCONN: return "ENOTCONN"; case EAGAIN: return "EAGAIN"; case EOVERFLOW: return "EOVERFLOW";
    default: return "EUNKNOWN";
  }
}

static napi_value errno_error(napi_env env, const char *syscall_name, int e, const char *path) {
  char msg[512];
  if (path) snprintf(msg, sizeof msg, "%s: %s, %s '%s'", errno_name(e), strerror(e), syscall_name, path);
  else snprintf(msg, sizeof msg, "%s: %s", syscall_name, strerror(e));
  napi_value code, message, err, errnum;
  napi_create_string_utf8(env, errno_name(e), NAPI_AUTO_LENGTH, &code);
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, code, message, &err);
  napi_create_int32(env, -e, &errnum);
  napi_set_named_property(env, err, "errno", errnum);
  napi_value sc;
  napi_create_string_utf8(env, syscall_name, NAPI_AUTO_LENGTH, &sc);
  napi_set_named_property(env, err, "syscall", sc);
  if (path) {
    napi_value p;
    napi_create_string_utf8(env, path, NAPI_AUTO_LENGTH, &p);
    napi_set_named_property(env, err, "path", p);
  }
  return err;
}

static napi_value throw_errno_path(napi_env env, const char *syscall_name, int e, const char *path) {
  napi_throw(env, errno_error(env, syscall_name, e, path));
  return NULL;
}

static napi_value throw_errno(napi_env env, const char *syscall_name, int e) {
  return throw_errno_path(env, syscall_name, e, NULL);
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


// Reads argv[i] as a finite number into *out; throws a TypeError naming `what` otherwise.
static int num_arg(napi_env env, napi_value v, const char *what, double *out) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t != napi_number) { napi_throw_type_error(env, "EINVAL", what); return 0; }
  napi_get_value_double(env, v, out);
  return 1;
}

// A string argument that must be present; throws a TypeError otherwise.
static char *req_string(napi_env env, napi_value v, const char *what) {
  char *s = opt_string(env, v);
  if (!s) napi_throw_type_error(env, "EINVAL", what);
  return s;
}

// flock(fd, operation) -> true, or false when LOCK_NB was given and the lock is
// held elsewhere (EWOULDBLOCK); other failures throw. Retries on EINTR. The
// fs/kv lmdb engine uses it for its host-wide open/commit gate.
static napi_value js_flock(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 2) { napi_throw_type_error(env, "EINVAL", "flock(fd, operation)"); return NULL; }
  double fd, op;
  if (!num_arg(env, argv[0], "flock: fd must be a number", &fd)) return NULL;
  if (!num_arg(env, argv[1], "flock: operation must be a number", &op)) return NULL;
  int rc, e = 0;
  do { rc = flock((int)fd, (int)op); e = rc != 0 ? errno : 0; } while (e == EINTR);
  napi_value r;
  if (rc == 0) { napi_get_boolean(env, true, &r); return r; }
  if (e == EWOULDBLOCK && ((int)op & LOCK_NB)) { napi_get_boolean(env, false, &r); return r; }
  return throw_errno(env, "flock", e);
}

// mknod(path, mode, major, minor): mode carries the file type (S_IFCHR, S_IFBLK, S_IFIFO).
static napi_value js_mknod(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 4) { napi_throw_type_error(env, "EINVAL", "mknod(path, mode, major, minor)"); return NULL; }
  double mode, maj, min;
  if (!num_arg(env, argv[1], "mode must be a number", &mode) || !num_arg(env, argv[2], "major must be a number", &maj) ||
      !num_arg(env, argv[3], "minor must be a number", &min)) return NULL;
  if (mode < 0 || mode > 0xffff || maj < 0 || maj > 0xfff || min < 0 || min > 0xfffff) {
    napi_throw_range_error(env, "EINVAL", "mknod: mode, major or minor out of range");
    return NULL;
  }
  char *path = req_string(env, argv[0], "path must be a string");
  if (!path) return NULL;
  int rc = mknod(path, (mode_t)mode, makedev((unsigned)maj, (unsigned)min));
  int e = errno;
  napi_value r = NULL;
  if (rc != 0) r = throw_errno_path(env, "mknod", e, path);
  free(path);
  return r;
}

// lsetxattr(path, name, value: Buffer, flags?)
static napi_value js_lsetxattr(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 3) { napi_throw_type_error(env, "EINVAL", "lsetxattr(path, name, value, flags?)"); return NULL; }
  bool isbuf = false;
  napi_is_buffer(env, argv[2], &isbuf);
  if (!isbuf) { napi_throw_type_error(env, "EINVAL", "value must be a Buffer"); return NULL; }
  void *data = NULL;
  size_t len = 0;
  napi_get_buffer_info(env, argv[2], &data, &len);
  int32_t flags = 0;
  if (argc > 3) napi_get_value_int32(env, argv[3], &flags);
  char *path = req_string(env, argv[0], "path must be a string");
  if (!path) return NULL;
  char *name = req_string(env, argv[1], "name must be a string");
  if (!name) { free(path); return NULL; }
  int rc = lsetxattr(path, name, data, len, flags);
  int e = errno;
  napi_value r = NULL;
  if (rc != 0) r = throw_errno_path(env, "lsetxattr", e, path);
  free(path); free(name);
  return r;
}

// lgetxattr(path, name) -> Buffer; ENODATA when the attribute is absent.
static napi_value js_lgetxattr(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 2) { napi_throw_type_error(env, "EINVAL", "lgetxattr(path, name)"); return NULL; }
  char *path = req_string(env, argv[0], "path must be a string");
  if (!path) return NULL;
  char *name = req_string(env, argv[1], "name must be a string");
  if (!name) { free(path); return NULL; }
  napi_value r = NULL;
  for (int attempt = 0; attempt < 4; attempt++) {
    ssize_t n = lgetxattr(path, name, NULL, 0);
    if (n < 0) { r = throw_errno_path(env, "lgetxattr", errno, path); break; }
    char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf) { r = throw_errno_path(env, "lgetxattr", ENOMEM, path); break; }
    ssize_t m = n > 0 ? lgetxattr(path, name, buf, (size_t)n) : 0;
    if (m < 0) {
      int e = errno;
      free(buf);
      if (e == ERANGE) continue;  // the value grew between the two calls
      r = throw_errno_path(env, "lgetxattr", e, path);
      break;
    }
    void *out = NULL;
    napi_create_buffer_copy(env, (size_t)m, buf, &out, &r);
    free(buf);
    break;
  }
  free(path); free(name);
  return r;
}

// llistxattr(path) -> string[]
static napi_value js_llistxattr(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 1) { napi_throw_type_error(env, "EINVAL", "llistxattr(path)"); return NULL; }
  char *path = req_string(env, argv[0], "path must be a string");
  if (!path) return NULL;
  napi_value r = NULL;
  for (int attempt = 0; attempt < 4; attempt++) {
    ssize_t n = llistxattr(path, NULL, 0);
    if (n < 0) { r = throw_errno_path(env, "llistxattr", errno, path); break; }
    char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf) { r = throw_errno_path(env, "llistxattr", ENOMEM, path); break; }
    ssize_t m = n > 0 ? llistxattr(path, buf, (size_t)n) : 0;
    if (m < 0) {
      int e = errno;
      free(buf);
      if (e == ERANGE) continue;
      r = throw_errno_path(env, "llistxattr", e, path);
      break;
    }
    napi_create_array(env, &r);
    uint32_t idx = 0;
    for (ssize_t off = 0; off < m;) {
      size_t l = strnlen(buf + off, (size_t)(m - off));
      if (l > 0) {
        napi_value s;
        napi_create_string_utf8(env, buf + off, l, &s);
        napi_set_element(env, r, idx++, s);
      }
      off += (ssize_t)l + 1;
    }
    free(buf);
    break;
  }
  free(path);
  return r;
}

// lremovexattr(path, name)
static napi_value js_lremovexattr(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 2) { napi_throw_type_error(env, "EINVAL", "lremovexattr(path, name)"); return NULL; }
  char *path = req_string(env, argv[0], "path must be a string");
  if (!path) return NULL;
  char *name = req_string(env, argv[1], "name must be a string");
  if (!name) { free(path); return NULL; }
  int rc = lremovexattr(path, name);
  int e = errno;
  napi_value r = NULL;
  if (rc != 0) r = throw_errno_path(env, "lremovexattr", e, path);
  free(path); free(name);
  return r;
}

// lutimens(path, atimeSec, atimeNsec, mtimeSec, mtimeNsec): utimensat(AT_SYMLINK_NOFOLLOW)
// with exact nanoseconds (fs.lutimes goes through a double and loses them).
static napi_value js_lutimens(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 5) { napi_throw_type_error(env, "EINVAL", "lutimens(path, atimeSec, atimeNsec, mtimeSec, mtimeNsec)"); return NULL; }
  double v[4];
  for (int i = 0; i < 4; i++) if (!num_arg(env, argv[i + 1], "times must be numbers", &v[i])) return NULL;
  if (v[1] < 0 || v[1] > 999999999 || v[3] < 0 || v[3] > 999999999 ||
      v[0] < -9007199254740991.0 || v[0] > 9007199254740991.0 || v[2] < -9007199254740991.0 || v[2] > 9007199254740991.0) {
    napi_throw_range_error(env, "EINVAL", "lutimens: time out of range");
    return NULL;
  }
  char *path = req_string(env, argv[0], "path must be a string");
  if (!path) return NULL;
  struct timespec ts[2] = { { (time_t)v[0], (long)v[1] }, { (time_t)v[2], (long)v[3] } };
  int rc = utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW);
  int e = errno;
  napi_value r = NULL;
  if (rc != 0) r = throw_errno_path(env, "utimensat", e, path);
  free(path);
  return r;
}

// unixListen(path, backlog = 128) -> fd: a listening AF_UNIX stream socket bound
// at `path`, for handing to a sandbox agent as its control channel (Node's
// net.Server cannot give up its fd to a child). The fd is CLOEXEC so it only
// reaches the one child it is explicitly passed to (spawn's stdio array dup2s
// it, which clears the flag on the child's copy); the socket node is created
// with mode 0600 (fchmod before bind sets the mode bind uses, so there is no
// window with a wider mode). The caller closes the fd (fs.closeSync) once the
// agent started, and unlinks the path when the sandbox goes.
static napi_value js_unix_listen(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 1) { napi_throw_type_error(env, "EINVAL", "unixListen(path, backlog?)"); return NULL; }
  double backlog = 128;
  if (argc > 1) {
    napi_valuetype t;
    napi_typeof(env, argv[1], &t);
    if (t != napi_undefined && !num_arg(env, argv[1], "backlog must be a number", &backlog)) return NULL;
  }
  if (backlog < 1 || backlog > 65535) { napi_throw_range_error(env, "EINVAL", "unixListen: backlog out of range"); return NULL; }
  char *path = req_string(env, argv[0], "path must be a string");
  if (!path) return NULL;
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof sa.sun_path) {
    napi_value r = throw_errno_path(env, "bind", ENAMETOOLONG, path);
    free(path);
    return r;
  }
  strcpy(sa.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const char *what = "socket";
  int e = 0;
  if (fd < 0) e = errno;
  else if (fchmod(fd, 0600) < 0) { e = errno; what = "fchmod"; }
  else if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) { e = errno; what = "bind"; }
  else if (listen(fd, (int)backlog) < 0) { e = errno; what = "listen"; unlink(path); }
  napi_value r = NULL;
  if (e) {
    if (fd >= 0) close(fd);
    r = throw_errno_path(env, what, e, path);
  } else {
    napi_create_int32(env, fd, &r);
  }
  free(path);
  return r;
}

static void free_aligned(napi_env env, void *data, void *hint) {
  int64_t adjusted;
  napi_adjust_external_memory(env, -(int64_t)(uintptr_t)hint, &adjusted);
  free(data);
}

// alignedBuffer(size, alignment): a Buffer whose memory starts at a multiple of
// `alignment` (a power of two), for O_DIRECT I/O, whose buffers the kernel
// needs aligned to the device's logical block size; Node has no aligned
// allocation. The memory is freed when the Buffer is collected.
static napi_value js_aligned_buffer(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 2) { napi_throw_type_error(env, "EINVAL", "alignedBuffer(size, alignment)"); return NULL; }
  double size, align;
  if (!num_arg(env, argv[0], "size must be a number", &size) || !num_arg(env, argv[1], "alignment must be a number", &align)) return NULL;
  if (size < 0 || size > (double)(1u << 30) || size != (double)(size_t)size) {
    napi_throw_range_error(env, "EINVAL", "alignedBuffer: size must be an integer in [0, 1 GiB]");
    return NULL;
  }
  size_t a = (size_t)align;
  if ((double)a != align || a < sizeof(void *) || a > 65536 || (a & (a - 1)) != 0) {
    napi_throw_range_error(env, "EINVAL", "alignedBuffer: alignment must be a power of two in [8, 65536]");
    return NULL;
  }
  size_t n = (size_t)size;
  void *p = NULL;
  int e = posix_memalign(&p, a, n > 0 ? n : a);
  if (e != 0) return throw_errno(env, "posix_memalign", e);
  napi_value r;
  if (napi_create_external_buffer(env, n, p, free_aligned, (void *)(uintptr_t)n, &r) != napi_ok) {
    free(p);
    napi_throw_error(env, "ENOMEM", "alignedBuffer: cannot wrap the memory in a Buffer");
    return NULL;
  }
  int64_t adjusted;
  napi_adjust_external_memory(env, (int64_t)n, &adjusted);
  return r;
}


// The bytes behind a TypedArray (any element type) or DataView; 0 with a
// JS TypeError pending when `value` is neither.
static int view_bytes(napi_env env, napi_value value, const char *what, void **data, size_t *len) {
  bool is = false;
  napi_is_typedarray(env, value, &is);
  if (is) {
    napi_typedarray_type type;
    size_t count, offset;
    napi_value ab;
    napi_get_typedarray_info(env, value, &type, &count, data, &ab, &offset);
    size_t width = 1;
    switch (type) {
      case napi_int16_array: case napi_uint16_array: width = 2; break;
      case napi_int32_array: case napi_uint32_array: case napi_float32_array: width = 4; break;
      case napi_float64_array: case napi_bigint64_array: case napi_biguint64_array: width = 8; break;
      default: width = 1;
    }
    *len = count * width;
    return 1;
  }
  napi_is_dataview(env, value, &is);
  if (is) {
    napi_value ab;
    size_t offset;
    napi_get_dataview_info(env, value, len, data, &ab, &offset);
    return 1;
  }
  napi_throw_type_error(env, "EINVAL", what);
  return 0;
}

// crc32c(data, initial = 0): CRC32C of a Uint8Array (or any TypedArray or
// DataView, over its bytes) continuing from `initial`. Only exported when the
// CPU has SSE4.2; fs/common/crc32c.ts falls back to @node-rs/crc32 otherwise.
static napi_value js_crc32c(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 1) { napi_throw_type_error(env, "EINVAL", "crc32c(data, initial?)"); return NULL; }
  void *data = NULL;
  size_t len = 0;
  if (!view_bytes(env, argv[0], "crc32c: data must be a Buffer, TypedArray or DataView", &data, &len)) return NULL;
  uint32_t initial = 0;
  if (argc > 1) {
    napi_valuetype t;
    napi_typeof(env, argv[1], &t);
    if (t == napi_number) napi_get_value_uint32(env, argv[1], &initial);
    else if (t != napi_undefined) { napi_throw_type_error(env, "EINVAL", "crc32c: initial must be a number"); return NULL; }
  }
  napi_value r;
  napi_create_uint32(env, len > 0 ? crc32c_hw(initial, (const uint8_t *)data, len) : initial, &r);
  return r;
}

// sendfile(socketFd, fileFd, offset, length, timeoutMs): Promise<void>. Copies
// length bytes of a file to a stream socket inside the kernel (for TCP the
// page-cache pages themselves are queued, no copy through user memory), on a
// libuv pool thread. The socket is non-blocking (libuv's); when its buffer is
// full the thread waits in poll() for room, at most timeoutMs per wait, then
// fails with ETIMEDOUT. The caller guarantees nothing else writes to the
// socket meanwhile and keeps the file descriptor open until the promise
// settles; the socket descriptor is duplicated here for the duration.
typedef struct {
  int sock, file;
  off_t offset;
  size_t length;
  int timeout_ms;
  int err;
  const char *syscall;
  napi_deferred deferred;
  napi_async_work work;
} sendfile_job;

// The (socketFd, fileFd, offset, length) arguments shared by sendfile and
// sendfileCached; 0 with a JS exception pending when they are not usable.
static int send_range_args(napi_env env, napi_value *argv, const char *fn, int *sock, int *file, off_t *offset, size_t *length) {
  double s, f, o, l;
  if (!num_arg(env, argv[0], "socketFd must be a number", &s) || !num_arg(env, argv[1], "fileFd must be a number", &f) ||
      !num_arg(env, argv[2], "offset must be a number", &o) || !num_arg(env, argv[3], "length must be a number", &l)) return 0;
  if (s < 0 || f < 0 || o < 0 || l < 0 || s != (int)s || f != (int)f || o != (double)(int64_t)o || l != (double)(int64_t)l) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s: descriptors, offset and length must be non-negative integers", fn);
    napi_throw_range_error(env, "EINVAL", msg);
    return 0;
  }
  *sock = (int)s;
  *file = (int)f;
  *offset = (off_t)o;
  *length = (size_t)l;
  return 1;
}

// The five arguments of sendfile and sendfileOnLoop: the range and a wait limit in ms.
static int send_call_args(napi_env env, napi_callback_info info, const char *fn, int *sock, int *file, off_t *offset, size_t *length, double *wait_ms) {
  size_t argc = 5;
  napi_value argv[5];
  char msg[160];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 5) {
    snprintf(msg, sizeof msg, "%s(socketFd, fileFd, offset, length, timeoutMs)", fn);
    napi_throw_type_error(env, "EINVAL", msg);
    return 0;
  }
  if (!send_range_args(env, argv, fn, sock, file, offset, length)) return 0;
  if (!num_arg(env, argv[4], "timeoutMs must be a number", wait_ms)) return 0;
  if (*wait_ms < 1 || *wait_ms > 2147483647) {
    snprintf(msg, sizeof msg, "%s: timeoutMs must be positive", fn);
    napi_throw_range_error(env, "EINVAL", msg);
    return 0;
  }
  return 1;
}

static void sendfile_execute(napi_env env, void *data) {
  sendfile_job *j = data;
  off_t off = j->offset;
  size_t left = j->length;
  while (left > 0) {
    ssize_t n = sendfile(j->sock, j->file, &off, left);
    if (n > 0) { left -= (size_t)n; continue; }
    if (n == 0) { j->err = EOVERFLOW; j->syscall = "sendfile"; return; }  // the file ended early
    if (errno == EINTR) continue;
    if (errno != EAGAIN) { j->err = errno; j->syscall = "sendfile"; return; }
    struct pollfd p = { .fd = j->sock, .events = POLLOUT };
    int r;
    do r = poll(&p, 1, j->timeout_ms); while (r < 0 && errno == EINTR);
    if (r < 0) { j->err = errno; j->syscall = "poll"; return; }
    if (r == 0) { j->err = ETIMEDOUT; j->syscall = "poll"; return; }
    if (p.revents & POLLNVAL) { j->err = EBADF; j->syscall = "poll"; return; }
    // on POLLERR/POLLHUP the next sendfile reports what went wrong
  }
}

static void sendfile_complete(napi_env env, napi_status status, void *data) {
  sendfile_job *j = data;
  close(j->sock);
  if (status != napi_ok && j->err == 0) { j->err = EIO; j->syscall = "sendfile"; }
  if (j->err) {
    napi_reject_deferred(env, j->deferred, errno_error(env, j->syscall, j->err, NULL));
  } else {
    napi_value undef;
    napi_get_undefined(env, &undef);
    napi_resolve_deferred(env, j->deferred, undef);
  }
  napi_delete_async_work(env, j->work);
  free(j);
}

static napi_value js_sendfile(napi_env env, napi_callback_info info) {
  int sock, file;
  off_t offset;
  size_t length;
  double timeout;
  if (!send_call_args(env, info, "sendfile", &sock, &file, &offset, &length, &timeout)) return NULL;
  sendfile_job *j = calloc(1, sizeof *j);
  if (!j) { napi_throw_error(env, "ENOMEM", "sendfile: out of memory"); return NULL; }
  // a private reference to the socket: should the owner close its descriptor meanwhile, the number
  // may be reused at once, and the rest of the bytes must not go to whatever it names then
  j->sock = fcntl(sock, F_DUPFD_CLOEXEC, 0);
  if (j->sock < 0) {
    int e = errno;
    free(j);
    return throw_errno(env, "fcntl", e);
  }
  j->file = file;
  j->offset = offset;
  j->length = length;
  j->timeout_ms = (int)timeout;
  napi_value promise, name;
  napi_create_promise(env, &j->deferred, &promise);
  napi_create_string_utf8(env, "strata.sendfile", NAPI_AUTO_LENGTH, &name);
  napi_create_async_work(env, NULL, name, sendfile_execute, sendfile_complete, j, &j->work);
  napi_queue_async_work(env, j->work);
  return promise;
}

// sendfileCached(socketFd, fileFd, offset, length): the part of a sendfile
// that can be done at once on the calling thread: when the whole range is in
// the page cache (cachestat(2), Linux 6.5+) it sends as much as the socket
// buffer takes without waiting and returns the byte count (the caller sends
// the rest with sendfileOnLoop); otherwise, or when the kernel lacks
// cachestat, it sends nothing and returns -1 (the caller goes on with the
// pool-thread sendfile, which may wait for the disk). Saves the pool-thread
// round trip, the costliest part of a send on a VM.
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
struct strata_cachestat_range { uint64_t off, len; };
struct strata_cachestat { uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted; };
static int cachestat_broken;

static napi_value js_sendfile_cached(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 4) { napi_throw_type_error(env, "EINVAL", "sendfileCached(socketFd, fileFd, offset, length)"); return NULL; }
  int sock, file;
  off_t offset;
  size_t length;
  if (!send_range_args(env, argv, "sendfileCached", &sock, &file, &offset, &length)) return NULL;
  napi_value r;
  double sent = -1;
  if (length == 0) sent = 0;
  else if (!cachestat_broken) {
    long page = sysconf(_SC_PAGESIZE);
    uint64_t first = (uint64_t)offset / (uint64_t)page;
    uint64_t last = ((uint64_t)offset + (uint64_t)length - 1) / (uint64_t)page;
    struct strata_cachestat_range range = { first * (uint64_t)page, (last - first + 1) * (uint64_t)page };
    struct strata_cachestat cs;
    memset(&cs, 0, sizeof cs);
    if (syscall(__NR_cachestat, file, &range, &cs, 0) < 0) {
      if (errno == ENOSYS) cachestat_broken = 1;
    } else if (cs.nr_cache >= last - first + 1) {
      off_t off = offset;
      size_t left = length;
      sent = 0;
      while (left > 0) {
        ssize_t n = sendfile(sock, file, &off, left);
        if (n > 0) { left -= (size_t)n; sent += (double)n; continue; }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN) return throw_errno(env, "sendfile", errno);
        break;  // socket buffer full (EAGAIN) or file ended: the caller's async send reports the rest
      }
    }
  }
  napi_create_double(env, sent, &r);
  return r;
}

// sendfileOnLoop(socketFd, fileFd, offset, length, stallMs): Promise<void>.
// The rest of a sendfile whose range is in the page cache but did not fit
// the socket buffer: the event loop itself waits for room (a libuv poll
// handle on a private duplicate of the socket descriptor) and each time
// sends what fits, on this thread. Unlike the pool-thread sendfile, no other
// thread is woken, which on this VM is the dearer half of such a send. Fails
// with ETIMEDOUT when the socket takes no byte for stallMs, with EOVERFLOW
// when the file ends early, with the errno of a failed send otherwise. The
// same contract as sendfile: nothing else writes to the socket meanwhile and
// the file descriptor stays open until the promise settles.
typedef struct {
  uv_poll_t poll;
  uv_timer_t timer;
  int sock, file;
  off_t off;
  size_t left;
  uint64_t stall_ms;
  int err;
  const char *syscall;
  int open_handles;
  int finishing;
  napi_env env;
  napi_deferred deferred;
  napi_async_context ctx;
} loop_send;

static void loop_send_closed(uv_handle_t *h) {
  loop_send *s = h->data;
  if (--s->open_handles > 0) return;
  close(s->sock);
  napi_env env = s->env;
  napi_handle_scope hs;
  napi_open_handle_scope(env, &hs);
  napi_value resource;
  napi_create_object(env, &resource);
  // a callback scope, so the promise's reactions run now and not at some later turn of the loop
  napi_callback_scope cs;
  napi_open_callback_scope(env, resource, s->ctx, &cs);
  if (s->err) {
    napi_reject_deferred(env, s->deferred, errno_error(env, s->syscall, s->err, NULL));
  } else {
    napi_value undef;
    napi_get_undefined(env, &undef);
    napi_resolve_deferred(env, s->deferred, undef);
  }
  napi_close_callback_scope(env, cs);
  napi_async_destroy(env, s->ctx);
  napi_close_handle_scope(env, hs);
  free(s);
}

static void loop_send_finish(loop_send *s, int err, const char *syscall_name) {
  if (s->finishing) return;
  s->finishing = 1;
  s->err = err;
  s->syscall = syscall_name;
  uv_poll_stop(&s->poll);
  uv_timer_stop(&s->timer);
  uv_close((uv_handle_t *)&s->poll, loop_send_closed);
  uv_close((uv_handle_t *)&s->timer, loop_send_closed);
}

static void loop_send_stalled(uv_timer_t *t) {
  loop_send_finish(t->data, ETIMEDOUT, "sendfile");
}

static void loop_send_writable(uv_poll_t *p, int status, int events) {
  loop_send *s = p->data;
  if (s->finishing) return;
  // on a poll error (the peer went away) the send itself tells what went wrong, if it can
  int progressed = 0;
  while (s->left > 0) {
    ssize_t n = sendfile(s->sock, s->file, &s->off, s->left);
    if (n > 0) { s->left -= (size_t)n; progressed = 1; continue; }
    if (n == 0) { loop_send_finish(s, EOVERFLOW, "sendfile"); return; }  // the file ended early
    if (errno == EINTR) continue;
    if (errno == EAGAIN) break;
    loop_send_finish(s, errno, "sendfile");
    return;
  }
  if (s->left == 0) { loop_send_finish(s, 0, NULL); return; }
  if (status < 0) { loop_send_finish(s, -status, "poll"); return; }
  if (progressed) uv_timer_start(&s->timer, loop_send_stalled, s->stall_ms, 0);
}

static napi_value js_sendfile_on_loop(napi_env env, napi_callback_info info) {
  int sock, file;
  off_t offset;
  size_t length;
  double stall;
  if (!send_call_args(env, info, "sendfileOnLoop", &sock, &file, &offset, &length, &stall)) return NULL;
  uv_loop_t *loop;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok) { napi_throw_error(env, "EINVAL", "sendfileOnLoop: no event loop"); return NULL; }
  loop_send *s = calloc(1, sizeof *s);
  if (!s) { napi_throw_error(env, "ENOMEM", "sendfileOnLoop: out of memory"); return NULL; }
  // a private descriptor: libuv keys its watchers by descriptor number, and Node's own
  // handle for this socket already watches the original one
  s->sock = fcntl(sock, F_DUPFD_CLOEXEC, 0);
  if (s->sock < 0) {
    int e = errno;
    free(s);
    return throw_errno(env, "fcntl", e);
  }
  int r = uv_poll_init(loop, &s->poll, s->sock);
  if (r < 0) {
    close(s->sock);
    free(s);
    return throw_errno(env, "uv_poll_init", -r);
  }
  s->file = file;
  s->off = offset;
  s->left = length;
  s->stall_ms = (uint64_t)stall;
  s->env = env;
  s->open_handles = 2;
  s->poll.data = s;
  s->timer.data = s;
  uv_timer_init(loop, &s->timer);
  napi_value promise, name, resource;
  napi_create_promise(env, &s->deferred, &promise);
  napi_create_string_utf8(env, "strata.sendfileOnLoop", NAPI_AUTO_LENGTH, &name);
  napi_create_object(env, &resource);
  napi_async_init(env, resource, name, &s->ctx);
  if (length == 0) {
    loop_send_finish(s, 0, NULL);
    return promise;
  }
  r = uv_poll_start(&s->poll, UV_WRITABLE, loop_send_writable);
  if (r < 0) {
    loop_send_finish(s, -r, "uv_poll_start");
    return promise;
  }
  uv_timer_start(&s->timer, loop_send_stalled, s->stall_ms, 0);
  return promise;
}

// isAligned(data, alignment): whether the memory of a TypedArray starts at a
// multiple of `alignment` (Node does not show addresses): a received chunk
// that already is can go to an O_DIRECT write without a bounce copy.
static napi_value js_is_aligned(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 2) { napi_throw_type_error(env, "EINVAL", "isAligned(data, alignment)"); return NULL; }
  void *data = NULL;
  size_t len = 0;
  if (!view_bytes(env, argv[0], "isAligned: data must be a TypedArray or DataView", &data, &len)) return NULL;
  double align;
  if (!num_arg(env, argv[1], "alignment must be a number", &align)) return NULL;
  size_t a = (size_t)align;
  if ((double)a != align || a == 0 || (a & (a - 1)) != 0) { napi_throw_range_error(env, "EINVAL", "isAligned: alignment must be a power of two"); return NULL; }
  napi_value r;
  napi_get_boolean(env, data != NULL && ((uintptr_t)data & (a - 1)) == 0, &r);
  return r;
}

// dataExtents(fd) -> [offset, length, offset, length, ...]: where a file has
// data (FS_IOC_FIEMAP), so that a file with holes is written to a tar as a
// sparse member instead of its size in zeros. Node has no SEEK_DATA/SEEK_HOLE,
// and EROFS answers those as if the file had no holes; its fiemap knows them.
// Extents are as the filesystem reports them (not merged); EOPNOTSUPP where
// the filesystem has no fiemap.
static napi_value js_data_extents(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 1) { napi_throw_type_error(env, "EINVAL", "dataExtents(fd)"); return NULL; }
  double fd;
  if (!num_arg(env, argv[0], "dataExtents: fd must be a number", &fd)) return NULL;
  enum { BATCH = 256 };
  size_t bytes = sizeof(struct fiemap) + BATCH * sizeof(struct fiemap_extent);
  struct fiemap *fm = malloc(bytes);
  if (!fm) return throw_errno(env, "fiemap", ENOMEM);
  napi_value out;
  napi_create_array(env, &out);
  uint32_t n = 0;
  uint64_t start = 0;
  for (;;) {
    memset(fm, 0, bytes);
    fm->fm_start = start;
    fm->fm_length = FIEMAP_MAX_OFFSET - start;
    fm->fm_extent_count = BATCH;
    if (ioctl((int)fd, FS_IOC_FIEMAP, fm) < 0) {
      int e = errno;
      free(fm);
      return throw_errno(env, "fiemap", e);
    }
    if (fm->fm_mapped_extents == 0) break;
    int last = 0;
    for (uint32_t i = 0; i < fm->fm_mapped_extents; i++) {
      struct fiemap_extent *x = &fm->fm_extents[i];
      napi_value v;
      napi_create_double(env, (double)x->fe_logical, &v);
      napi_set_element(env, out, n++, v);
      napi_create_double(env, (double)x->fe_length, &v);
      napi_set_element(env, out, n++, v);
      if (x->fe_flags & FIEMAP_EXTENT_LAST) last = 1;
      start = x->fe_logical + x->fe_length;
    }
    if (last || fm->fm_mapped_extents < BATCH) break;
  }
  free(fm);
  return out;
}

// dataSegments(fd, size) -> [offset, length, ...]: where reads of a file of
// `size` bytes (its size when stat'ed) return data, by lseek SEEK_DATA /
// SEEK_HOLE, as GNU tar and cp find holes. A hole is what the kernel promises
// reads as zeros, which FIEMAP's physical extents do not (dirty pages not yet
// allocated, filesystems without fiemap such as tmpfs). A filesystem without
// hole support answers one segment: the whole file. Used to import a local
// directory's sparse files with their holes.
static napi_value js_data_segments(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 2) { napi_throw_type_error(env, "EINVAL", "dataSegments(fd, size)"); return NULL; }
  double fd, size;
  if (!num_arg(env, argv[0], "dataSegments: fd must be a number", &fd)) return NULL;
  if (!num_arg(env, argv[1], "dataSegments: size must be a number", &size)) return NULL;
  napi_value out;
  napi_create_array(env, &out);
  uint32_t n = 0;
  off_t end = (off_t)size;
  off_t pos = 0;
  while (pos < end) {
    off_t data = lseek((int)fd, pos, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break; // no data after pos: the rest is a hole
      return throw_errno(env, "lseek", errno);
    }
    if (data >= end) break;
    off_t hole = lseek((int)fd, data, SEEK_HOLE);
    if (hole < 0) return throw_errno(env, "lseek", errno);
    if (hole > end) hole = end;
    napi_value v;
    napi_create_double(env, (double)data, &v);
    napi_set_element(env, out, n++, v);
    napi_create_double(env, (double)(hole - data), &v);
    napi_set_element(env, out, n++, v);
    pos = hole;
  }
  return out;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    {"mount", NULL, js_mount, NULL, NULL, NULL, napi_default, NULL},
    {"umount2", NULL, js_umount2, NULL, NULL, NULL, napi_default, NULL},
    {"gettid", NULL, js_gettid, NULL, NULL, NULL, napi_default, NULL},
    {"mknod", NULL, js_mknod, NULL, NULL, NULL, napi_default, NULL},
    {"lsetxattr", NULL, js_lsetxattr, NULL, NULL, NULL, napi_default, NULL},
    {"lgetxattr", NULL, js_lgetxattr, NULL, NULL, NULL, napi_default, NULL},
    {"llistxattr", NULL, js_llistxattr, NULL, NULL, NULL, napi_default, NULL},
    {"lremovexattr", NULL, js_lremovexattr, NULL, NULL, NULL, napi_default, NULL},
    {"lutimens", NULL, js_lutimens, NULL, NULL, NULL, napi_default, NULL},
    {"unixListen", NULL, js_unix_listen, NULL, NULL, NULL, napi_default, NULL},
    {"alignedBuffer", NULL, js_aligned_buffer, NULL, NULL, NULL, napi_default, NULL},
    {"flock", NULL, js_flock, NULL, NULL, NULL, napi_default, NULL},
    {"sendfile", NULL, js_sendfile, NULL, NULL, NULL, napi_default, NULL},
    {"sendfileCached", NULL, js_sendfile_cached, NULL, NULL, NULL, napi_default, NULL},
    {"sendfileOnLoop", NULL, js_sendfile_on_loop, NULL, NULL, NULL, napi_default, NULL},
    {"isAligned", NULL, js_is_aligned, NULL, NULL, NULL, napi_default, NULL},
    {"dataExtents", NULL, js_data_extents, NULL, NULL, NULL, napi_default, NULL},
    {"dataSegments", NULL, js_data_segments, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  if (crc32c_hw_init()) {
    napi_property_descriptor crc = {"crc32c", NULL, js_crc32c, NULL, NULL, NULL, napi_default, NULL};
    napi_define_properties(env, exports, 1, &crc);
  }
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
