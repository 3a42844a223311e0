// File operations. Each request runs in its own forked worker process that owns
// the connection and does plain blocking I/O: a slow disk, a stalled FUSE read
// or a huge recursive remove never holds up the event loop in PID 1, and a
// request made on behalf of a user switches to that user's identity without
// touching the agent's. Workers inherit PR_SET_DUMPABLE=0, so sandbox
// processes cannot trace them or read their memory either.
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_close_range
#define __NR_close_range 436
#endif
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1
#endif

void close_from(int low) {
  if (syscall(__NR_close_range, (unsigned)low, ~0u, 0u) == 0) return;
  long max = 65536;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (1u << 20)) max = (long)rl.rlim_cur;
  for (long fd = low; fd < max; fd++) close((int)fd);
}

// Workloads never hold CAP_SYS_PTRACE, whatever the runtime granted: it is the
// one capability that overrides PR_SET_DUMPABLE=0 (ptrace, /proc/1/mem,
// /proc/1/fd). Removed from the bounding set (needs CAP_SETPCAP, which
// Docker's default set has) and from the inheritable, permitted and effective
// sets, so no execve can bring it back. Tracing one's own children still works.
void drop_ptrace_cap(void) {
  prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0);
  struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d) != 0) return;
  unsigned idx = CAP_SYS_PTRACE / 32;
  uint32_t bit = 1u << (CAP_SYS_PTRACE % 32);
  d[idx].effective &= ~bit;
  d[idx].permitted &= ~bit;
  d[idx].inheritable &= ~bit;
  syscall(SYS_capset, &h, d);
}

int mkdir_p(const char *path, mode_t mode) {
  char buf[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf) { errno = n ? ENAMETOOLONG : ENOENT; return -1; }
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != 0) continue;
    char saved = buf[i];
    buf[i] = 0;
    if (buf[i - 1] != '/' && mkdir(buf, mode) < 0) {
      int e = errno;
      struct stat st;
      if (e != EEXIST) return -1;
      if (stat(buf, &st) < 0) return -1;
      if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
    }
    buf[i] = saved;
  }
  return 0;
}

// ---------------------------------------------------------------- blocking connection

int w_flush(struct wconn *c) {
  while (buf_pending(&c->out)) {
    ssize_t n = send(c->fd, c->out.p + c->out.off, buf_pending(&c->out), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    buf_consume(&c->out, (size_t)n);
  }
  return 0;
}

static size_t w_last; // bytes of the frame handed out by the previous w_read_frame

int w_read_frame(struct wconn *c, uint8_t *type, uint8_t **payload, uint32_t *plen) {
  buf_consume(&c->in, w_last);
  w_last = 0;
  for (;;) {
    if (buf_pending(&c->in) >= FRAME_HDR) {
      if (frame_header(c->in.p + c->in.off, type, plen) < 0) { errno = EPROTO; return -1; }
      if (buf_pending(&c->in) >= FRAME_HDR + (size_t)*plen) {
        *payload = c->in.p + c->in.off + FRAME_HDR;
        w_last = FRAME_HDR + *plen;
        return 1;
      }
    }
    if (buf_reserve(&c->in, DATA_CHUNK + FRAME_HDR) < 0) return -1;
    ssize_t n = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) { errno = ECONNRESET; return buf_pending(&c->in) ? -1 : 0; }
    c->in.len += (size_t)n;
  }
}

void w_error(struct wconn *c, int err, const char *path, const char *fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  frame_error(&c->out, err, path, "%s", msg);
  w_flush(c);
}

ssize_t w_read_data(struct wconn *c, uint8_t **data) {
  for (;;) {
    uint8_t type;
    uint32_t plen;
    int r = w_read_frame(c, &type, data, &plen);
    if (r < 0 && errno == EPROTO) { w_error(c, EPROTO, NULL, "bad frame length"); return -1; }
    if (r <= 0) return -1; // the client went away mid-stream; nobody to tell
    if (type == F_DATA) { if (plen) return (ssize_t)plen; continue; }
    if (type == F_EOF) return 0;
    w_error(c, EPROTO, NULL, "expected data, got frame type 0x%02x", type);
    return -1;
  }
}

static int w_done(struct wconn *c, bool has_bytes, uint64_t bytes) {
  size_t st = frame_begin(&c->out, R_DONE);
  if (has_bytes) put_u64(&c->out, K_BYTES, bytes);
  frame_end(&c->out, st);
  return w_flush(c);
}

static int write_all(int fd, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

// Writes that leave holes: a block of zeros (SPARSE_BLOCK bytes at an aligned file offset) is
// skipped with lseek instead of written, and sparse_finish sets the size when the file ends in
// one, so a sparse file sent as a stream of zeros is sparse again (as cp --sparse=always makes
// it). Only for a regular file written from offset 0 without O_APPEND (`on`); else plain writes.
static bool zero_block(const uint8_t *p, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v;
    memcpy(&v, p + i, 8);
    if (v) return false;
  }
  for (size_t i = n & ~(size_t)7; i < n; i++) if (p[i]) return false;
  return true;
}

void sparse_init(struct sparse *s, int fd, bool may_seek) {
  struct stat st;
  *s = (struct sparse){ .fd = fd, .on = may_seek && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) };
}

// Whole blocks at an aligned offset: runs of zero blocks are skipped, the others written.
static int sparse_emit(struct sparse *s, const uint8_t *p, size_t n) {
  while (n) {
    bool z = zero_block(p, SPARSE_BLOCK);
    size_t run = SPARSE_BLOCK;
    while (run < n && zero_block(p + run, SPARSE_BLOCK) == z) run += SPARSE_BLOCK;
    if (z) { if (lseek(s->fd, (off_t)run, SEEK_CUR) < 0) return -1; }
    else if (write_all(s->fd, p, run) < 0) return -1;
    s->hole_at_end = z;
    p += run;
    n -= run;
    s->off += run;
  }
  return 0;
}

int sparse_write(struct sparse *s, const uint8_t *p, size_t n) {
  if (!s->on) { if (write_all(s->fd, p, n) < 0) return -1; s->off += n; return 0; }
  // blocks are judged whole, wherever the chunks of the stream begin and end: a partial one waits in blk
  if (s->blen) {
    size_t take = SPARSE_BLOCK - s->blen < n ? SPARSE_BLOCK - s->blen : n;
    memcpy(s->blk + s->blen, p, take);
    s->blen += take;
    p += take;
    n -= take;
    if (s->blen < SPARSE_BLOCK) return 0;
    s->blen = 0;
    if (sparse_emit(s, s->blk, SPARSE_BLOCK) < 0) return -1;
  }
  size_t whole = n - n % SPARSE_BLOCK;
  if (whole && sparse_emit(s, p, whole) < 0) return -1;
  memcpy(s->blk, p + whole, n - whole);
  s->blen = n - whole;
  return 0;
}

int sparse_finish(struct sparse *s) {
  if (!s->on) return 0;
  if (s->blen) { // the last, partial block
    bool z = zero_block(s->blk, s->blen);
    if (z ? lseek(s->fd, (off_t)s->blen, SEEK_CUR) < 0 : write_all(s->fd, s->blk, s->blen) < 0) return -1;
    s->hole_at_end = z;
    s->off += s->blen;
    s->blen = 0;
  }
  return s->hole_at_end ? ftruncate(s->fd, (off_t)s->off) : 0;
}

// ---------------------------------------------------------------- entries

static char type_char(mode_t m) {
  if (S_ISREG(m)) return 'f';
  if (S_ISDIR(m)) return 'd';
  if (S_ISLNK(m)) return 'l';
  if (S_ISCHR(m)) return 'c';
  if (S_ISBLK(m)) return 'b';
  if (S_ISFIFO(m)) return 'p';
  if (S_ISSOCK(m)) return 's';
  return '?';
}

static int put_entry(struct buf *b, const char *name, const char *path, const struct stat *st, int dfd, const char *lname) {
  size_t s = frame_begin(b, R_ENTRY);
  int64_t mt = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
  int rc = put_str(b, K_NAME, name) | put_u64(b, K_TYPE, (uint64_t)type_char(st->st_mode)) |
           put_u64(b, K_SIZE, (uint64_t)st->st_size) | put_u64(b, K_MODE, (uint64_t)(st->st_mode & 07777)) |
           put_u64(b, K_MTIME_NS, (uint64_t)mt) | put_u64(b, K_UID, st->st_uid) | put_u64(b, K_GID, st->st_gid) |
           put_u64(b, K_NLINK, (uint64_t)st->st_nlink);
  if (path) rc |= put_str(b, K_PATH, path);
  if (S_ISLNK(st->st_mode)) {
    char t[4096];
    ssize_t n = readlinkat(dfd, lname, t, sizeof t - 1);
    if (n >= 0) { t[n] = 0; rc |= put_str(b, K_TARGET, t); }
  }
  frame_end(b, s);
  return rc;
}

// ---------------------------------------------------------------- operations

static int op_read(struct wconn *c, const char *path, bool has_off, uint64_t off, bool has_len, uint64_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) { w_error(c, errno, path, "open %s: %s", path, strerror(errno)); return -1; }
  struct stat st;
  if (fstat(fd, &st) < 0) { w_error(c, errno, path, "stat %s: %s", path, strerror(errno)); return -1; }
  if (S_ISDIR(st.st_mode)) { w_error(c, EISDIR, path, "%s is a directory", path); return -1; }
  // FIFOs and sockets could block forever with nobody on the other side.
  if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode)) {
    w_error(c, EINVAL, path, "%s is not a regular file or device", path);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (has_off && lseek(fd, (off_t)off, SEEK_SET) < 0) { w_error(c, errno, path, "seek %s: %s", path, strerror(errno)); return -1; }
  uint64_t total = 0;
  static uint8_t chunk[DATA_CHUNK];
  for (;;) {
    size_t want = sizeof chunk;
    if (has_len && len - total < want) want = (size_t)(len - total);
    if (!want) break;
    ssize_t n = read(fd, chunk, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) { w_error(c, errno, path, "read %s: %s", path, strerror(errno)); return -1; }
    if (n == 0) break;
    size_t s = frame_begin(&c->out, R_DATA);
    if (put_raw(&c->out, chunk, (size_t)n) < 0) return -1;
    frame_end(&c->out, s);
    if (w_flush(c) < 0) return -1;
    total += (uint64_t)n;
  }
  close(fd);
  return w_done(c, true, total);
}

static char *dirname_of(const char *path) {
  char *d = strdup(path);
  if (!d) return NULL;
  char *slash = strrchr(d, '/');
  if (!slash) { free(d); return strdup("."); }
  if (slash == d) slash[1] = 0;
  else *slash = 0;
  return d;
}

static int op_write(struct wconn *c, const char *path, uint64_t flags, bool has_mode, uint64_t mode) {
  if (flags & FWRITE_MKDIRS) {
    char *d = dirname_of(path);
    if (!d || mkdir_p(d, 0755) < 0) { int e = d ? errno : ENOMEM; w_error(c, e, d, "mkdir -p %s: %s", d ? d : path, strerror(e)); free(d); return -1; }
    free(d);
  }
  int of = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | ((flags & FWRITE_APPEND) ? O_APPEND : O_TRUNC) |
           ((flags & FWRITE_EXCL) ? O_EXCL : 0);
  int fd = open(path, of, has_mode ? (mode_t)(mode & 07777) : 0644);
  if (fd < 0) { w_error(c, errno, path, "open %s: %s", path, strerror(errno)); return -1; }
  if (has_mode && fchmod(fd, (mode_t)(mode & 07777)) < 0) { w_error(c, errno, path, "chmod %s: %s", path, strerror(errno)); return -1; }
  uint64_t total = 0;
  struct sparse sw;
  sparse_init(&sw, fd, !(flags & FWRITE_APPEND));
  for (;;) {
    uint8_t *data;
    ssize_t n = w_read_data(c, &data);
    if (n < 0) return -1;
    if (n == 0) break;
    if (sparse_write(&sw, data, (size_t)n) < 0) { w_error(c, errno, path, "write %s: %s", path, strerror(errno)); return -1; }
    total += (uint64_t)n;
  }
  if (sparse_finish(&sw) < 0) { w_error(c, errno, path, "truncate %s: %s", path, strerror(errno)); return -1; }
  if (close(fd) < 0) { w_error(c, errno, path, "close %s: %s", path, strerror(errno)); return -1; }
  return w_done(c, true, total);
}

static int op_list(struct wconn *c, const char *path) {
  DIR *d = opendir(path);
  if (!d) { w_error(c, errno, path, "opendir %s: %s", path, strerror(errno)); return -1; }
  uint64_t count = 0;
  struct dirent *de;
  errno = 0;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue; // removed meanwhile
    if (put_entry(&c->out, de->d_name, NULL, &st, dirfd(d), de->d_name) < 0) return -1;
    count++;
    if (buf_pending(&c->out) >= DATA_CHUNK && w_flush(c) < 0) return -1;
    errno = 0;
  }
  if (errno) { w_error(c, errno, path, "readdir %s: %s", path, strerror(errno)); return -1; }
  closedir(d);
  return w_done(c, true, count);
}

static const char *base_of(const char *path) {
  const char *s = strrchr(path, '/');
  return s && s[1] ? s + 1 : path;
}

static int op_stat(struct wconn *c, const char *path, uint64_t flags) {
  struct stat st;
  int r = (flags & FSTAT_NOFOLLOW) ? lstat(path, &st) : stat(path, &st);
  if (r < 0) { w_error(c, errno, path, "stat %s: %s", path, strerror(errno)); return -1; }
  if (put_entry(&c->out, base_of(path), path, &st, AT_FDCWD, path) < 0) return -1;
  return w_done(c, false, 0);
}

static int op_mkdir(struct wconn *c, const char *path, uint64_t flags, bool has_mode, uint64_t mode) {
  mode_t m = has_mode ? (mode_t)(mode & 07777) : 0755;
  int r = (flags & FMKDIR_PARENTS) ? mkdir_p(path, m) : mkdir(path, m);
  if (r < 0) { w_error(c, errno, path, "mkdir %s: %s", path, strerror(errno)); return -1; }
  if (has_mode && chmod(path, m) < 0) { w_error(c, errno, path, "chmod %s: %s", path, strerror(errno)); return -1; }
  return w_done(c, false, 0);
}

// rm -rf below dfd/name without following symlinks. Keeps going past errors
// (a read-only dataset mount inside the tree) and reports the first one.
static int rm_at(int dfd, const char *name, int depth) {
  if (unlinkat(dfd, name, 0) == 0) return 0;
  int e = errno;
  if (e == ENOENT) return 0;
  if (e != EISDIR && e != EPERM) return -1;
  if (depth > 4096) { errno = ELOOP; return -1; }
  int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) { errno = errno == ENOTDIR ? e : errno; return -1; }
  DIR *d = fdopendir(fd);
  if (!d) { close(fd); return -1; }
  int first = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (rm_at(fd, de->d_name, depth + 1) < 0 && !first) first = errno;
  }
  closedir(d);
  if (unlinkat(dfd, name, AT_REMOVEDIR) < 0) { if (!first) first = errno; }
  if (first) { errno = first; return -1; }
  return 0;
}

static int op_remove(struct wconn *c, char *path, uint64_t flags) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') path[--n] = 0;
  bool root = true;
  for (char *p = path; *p; p++) if (*p != '/') root = false;
  if (root) { w_error(c, EINVAL, path, "refusing to remove /"); return -1; }
  struct stat st;
  if (lstat(path, &st) < 0) {
    if (errno == ENOENT && (flags & FREMOVE_FORCE)) return w_done(c, false, 0);
    w_error(c, errno, path, "remove %s: %s", path, strerror(errno));
    return -1;
  }
  int r;
  if (!S_ISDIR(st.st_mode)) r = unlink(path);
  else if (!(flags & FREMOVE_RECURSIVE)) r = rmdir(path);
  else {
    char *d = dirname_of(path);
    int dfd = d ? open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    free(d);
    r = dfd < 0 ? -1 : rm_at(dfd, base_of(path), 0);
  }
  if (r < 0) { w_error(c, errno, path, "remove %s: %s", path, strerror(errno)); return -1; }
  return w_done(c, false, 0);
}

static int op_rename(struct wconn *c, const char *from, const char *to, uint64_t flags) {
  int r = (flags & FRENAME_NOREPLACE) ? (int)syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE)
                                      : rename(from, to);
  if (r < 0) { w_error(c, errno, from, "rename %s -> %s: %s", from, to, strerror(errno)); return -1; }
  return w_done(c, false, 0);
}

// Lingering close (see conn_flush in main.c): after the last reply, shut down
// our side and discard input until the client closes, at most 5 s, so an error
// reply is never lost to ECONNRESET while the client is still sending.
static void w_finish(struct wconn *c) {
  w_flush(c);
  shutdown(c->fd, SHUT_WR);
  int64_t end = now_ms() + 5000;
  static uint8_t scratch[DATA_CHUNK];
  for (;;) {
    int64_t left = end - now_ms();
    if (left <= 0) break;
    struct pollfd p = { .fd = c->fd, .events = POLLIN };
    int r = poll(&p, 1, (int)left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    ssize_t n = recv(c->fd, scratch, sizeof scratch, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
  }
  close(c->fd);
}

void file_worker(int fd, uint8_t type, const uint8_t *payload, uint32_t plen, const uint8_t *rest, size_t restlen) {
  struct wconn c = { .fd = fd };
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  // Deep trees (tar, rm -r) hold one fd per level.
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) { rl.rlim_cur = rl.rlim_max; setrlimit(RLIMIT_NOFILE, &rl); }
  if (restlen && buf_append(&c.in, rest, restlen) < 0) _exit(1);

  char *path = NULL, *path2 = NULL, *user = NULL;
  uint64_t mode = 0, flags = 0, uid = 0, gid = 0, off = 0, len = 0;
  bool has_mode = false, has_uid = false, has_gid = false, has_off = false, has_len = false;
  struct tlv t = { payload, plen, 0 };
  uint8_t k;
  const uint8_t *v;
  uint32_t vl;
  while (tlv_next(&t, &k, &v, &vl) == 1) {
    char **sp = k == K_PATH ? &path : k == K_PATH2 ? &path2 : k == K_USER ? &user : NULL;
    if (sp) {
      free(*sp);
      *sp = tlv_str(v, vl);
      if (!*sp) { w_error(&c, EINVAL, NULL, "a string field contains a NUL byte"); w_finish(&c); _exit(1); }
      continue;
    }
    uint64_t x;
    if (tlv_u64(v, vl, &x) < 0) continue;
    switch (k) {
      case K_MODE: mode = x; has_mode = true; break;
      case K_FLAGS: flags = x; break;
      case K_UID: uid = x; has_uid = true; break;
      case K_GID: gid = x; has_gid = true; break;
      case K_OFFSET: off = x; has_off = true; break;
      case K_LENGTH: len = x; has_len = true; break;
      default: break;
    }
  }
  if (!path || !path[0]) { w_error(&c, EINVAL, NULL, "a path is required"); w_finish(&c); _exit(1); }
  if (type == F_FRENAME && (!path2 || !path2[0])) { w_error(&c, EINVAL, NULL, "rename needs a target path"); w_finish(&c); _exit(1); }

  struct ident id;
  char msg[512];
  int e = resolve_ident(user, has_uid, uid, has_gid, gid, &id, msg, sizeof msg);
  if (e) { w_error(&c, e, NULL, "%s", msg); w_finish(&c); _exit(1); }
  const char *what = NULL;
  if ((e = apply_ident(&id, &what))) { w_error(&c, e, NULL, "%s: %s", what, strerror(e)); w_finish(&c); _exit(1); }
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); // a uid change resets it to suid_dumpable; be explicit

  int rc;
  switch (type) {
    case F_FREAD: rc = op_read(&c, path, has_off, off, has_len, len); break;
    case F_FWRITE: rc = op_write(&c, path, flags, has_mode, mode); break;
    case F_FLIST: rc = op_list(&c, path); break;
    case F_FSTAT: rc = op_stat(&c, path, flags); break;
    case F_FMKDIR: rc = op_mkdir(&c, path, flags, has_mode, mode); break;
    case F_FREMOVE: rc = op_remove(&c, path, flags); break;
    case F_FRENAME: rc = op_rename(&c, path, path2, flags); break;
    case F_TAR_GET: rc = tar_get(&c, path); if (rc == 0) rc = w_done(&c, false, 0); break;
    case F_TAR_PUT: rc = tar_put(&c, path, flags); break;
    default: w_error(&c, EPROTO, NULL, "not a file request"); rc = -1; break;
  }
  w_finish(&c);
  _exit(rc < 0 ? 1 : 0);
}
