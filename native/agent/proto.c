// Frame and TLV encoding shared by the event loop and the file workers. Every
// length read off the wire is checked against what is actually present before
// it is used; nothing here trusts the peer.
#include "agent.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int buf_reserve(struct buf *b, size_t extra) {
  if (b->off > 0 && b->off == b->len) b->off = b->len = 0;
  if (b->len + extra <= b->cap) return 0;
  // Compact before growing: consumed bytes at the front are dead.
  if (b->off > 0) {
    memmove(b->p, b->p + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
    if (b->len + extra <= b->cap) return 0;
  }
  size_t want = b->cap ? b->cap : 4096;
  while (want < b->len + extra) {
    if (want > SIZE_MAX / 2) { errno = ENOMEM; return -1; }
    want *= 2;
  }
  uint8_t *p = realloc(b->p, want);
  if (!p) { errno = ENOMEM; return -1; }
  b->p = p;
  b->cap = want;
  return 0;
}

int buf_append(struct buf *b, const void *data, size_t n) {
  if (buf_reserve(b, n) < 0) return -1;
  if (n) memcpy(b->p + b->len, data, n);
  b->len += n;
  return 0;
}

void buf_consume(struct buf *b, size_t n) {
  b->off += n;
  if (b->off >= b->len) b->off = b->len = 0;
}

void buf_free(struct buf *b) {
  free(b->p);
  b->p = NULL;
  b->off = b->len = b->cap = 0;
}

static void be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

static uint32_t rd32(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

// Frames are built in place: the header is reserved first and its length filled
// in by frame_end, so a frame never needs a second copy. The returned start is
// relative to b->off because buf_reserve may compact the buffer (move the
// unconsumed bytes to the front) while the frame is being built. A failed put_*
// (ENOMEM) leaves a half-built frame: callers then drop the whole connection.
size_t frame_begin(struct buf *b, uint8_t type) {
  if (buf_reserve(b, FRAME_HDR) < 0) return (size_t)-1;
  size_t start = b->len;
  memset(b->p + start, 0, 4);
  b->p[start + 4] = type;
  b->len += FRAME_HDR;
  return start - b->off;
}

void frame_end(struct buf *b, size_t start) {
  if (start == (size_t)-1) return;
  size_t at = b->off + start;
  be32(b->p + at, (uint32_t)(b->len - at - 4));
}

int put_raw(struct buf *b, const void *data, size_t n) { return buf_append(b, data, n); }

static int put_field(struct buf *b, uint8_t key, const void *v, uint32_t n) {
  if (buf_reserve(b, 5 + (size_t)n) < 0) return -1;
  b->p[b->len] = key;
  be32(b->p + b->len + 1, n);
  if (n) memcpy(b->p + b->len + 5, v, n);
  b->len += 5 + (size_t)n;
  return 0;
}

int put_u64(struct buf *b, uint8_t key, uint64_t v) {
  uint8_t x[8];
  for (int i = 7; i >= 0; i--) { x[i] = (uint8_t)v; v >>= 8; }
  return put_field(b, key, x, 8);
}

int put_str(struct buf *b, uint8_t key, const char *s) {
  size_t n = strlen(s);
  if (n > MAX_PAYLOAD / 2) n = MAX_PAYLOAD / 2;
  return put_field(b, key, s, (uint32_t)n);
}

int frame_error(struct buf *b, int err, const char *path, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  size_t s = frame_begin(b, R_ERROR);
  if (s == (size_t)-1) return -1;
  int rc = put_u64(b, K_ERRNO, (uint64_t)err) | put_str(b, K_ERRNAME, errno_name(err)) |
           put_str(b, K_MESSAGE, msg);
  if (path) rc |= put_str(b, K_PATH, path);
  frame_end(b, s);
  return rc ? -1 : 0;
}

int frame_header(const uint8_t *p, uint8_t *type, uint32_t *plen) {
  uint32_t len = rd32(p);
  if (len < 1 || len > MAX_PAYLOAD + 1) return -1;
  *type = p[4];
  *plen = len - 1;
  return 0;
}

int tlv_next(struct tlv *t, uint8_t *key, const uint8_t **val, uint32_t *vlen) {
  if (t->pos == t->len) return 0;
  if (t->len - t->pos < 5) return -1;
  uint32_t n = rd32(t->p + t->pos + 1);
  if (n > t->len - t->pos - 5) return -1;
  *key = t->p[t->pos];
  *vlen = n;
  *val = t->p + t->pos + 5;
  t->pos += 5 + (size_t)n;
  return 1;
}

bool tlv_valid(const uint8_t *p, size_t len) {
  struct tlv t = { p, len, 0 };
  uint8_t k;
  const uint8_t *v;
  uint32_t n;
  int r;
  while ((r = tlv_next(&t, &k, &v, &n)) == 1) {}
  return r == 0;
}

int tlv_u64(const uint8_t *val, uint32_t vlen, uint64_t *out) {
  if (vlen != 8) return -1;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | val[i];
  *out = v;
  return 0;
}

char *tlv_str(const uint8_t *val, uint32_t vlen) {
  if (memchr(val, 0, vlen)) { errno = EINVAL; return NULL; }
  char *s = malloc((size_t)vlen + 1);
  if (!s) { errno = ENOMEM; return NULL; }
  memcpy(s, val, vlen);
  s[vlen] = 0;
  return s;
}

const char *errno_name(int e) {
  switch (e) {
    case EPERM: return "EPERM"; case ENOENT: return "ENOENT"; case ESRCH: return "ESRCH";
    case EINTR: return "EINTR"; case EIO: return "EIO"; case ENXIO: return "ENXIO";
    case E2BIG: return "E2BIG"; case ENOEXEC: return "ENOEXEC"; case EBADF: return "EBADF";
    case ECHILD: return "ECHILD"; case EAGAIN: return "EAGAIN"; case ENOMEM: return "ENOMEM";
    case EACCES: return "EACCES"; case EFAULT: return "EFAULT"; case EBUSY: return "EBUSY";
    case EEXIST: return "EEXIST"; case EXDEV: return "EXDEV"; case ENODEV: return "ENODEV";
    case ENOTDIR: return "ENOTDIR"; case EISDIR: return "EISDIR"; case EINVAL: return "EINVAL";
    case ENFILE: return "ENFILE"; case EMFILE: return "EMFILE"; case ENOTTY: return "ENOTTY";
    case ETXTBSY: return "ETXTBSY"; case EFBIG: return "EFBIG"; case ENOSPC: return "ENOSPC";
    case ESPIPE: return "ESPIPE"; case EROFS: return "EROFS"; case EMLINK: return "EMLINK";
    case EPIPE: return "EPIPE"; case ERANGE: return "ERANGE"; case ENAMETOOLONG: return "ENAMETOOLONG";
    case ENOSYS: return "ENOSYS"; case ENOTEMPTY: return "ENOTEMPTY"; case ELOOP: return "ELOOP";
    case ENODATA: return "ENODATA"; case EPROTO: return "EPROTO"; case EOPNOTSUPP: return "EOPNOTSUPP";
    case ETIMEDOUT: return "ETIMEDOUT"; case ESHUTDOWN: return "ESHUTDOWN"; case EDQUOT: return "EDQUOT";
    case ECANCELED: return "ECANCELED"; case ECONNRESET: return "ECONNRESET";
    case EOVERFLOW: return "EOVERFLOW"; case EILSEQ: return "EILSEQ"; case EMSGSIZE: return "EMSGSIZE";
    default: return "EUNKNOWN";
  }
}

int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Diagnostics go to fd 2, which the host points at a log file outside the
// sandbox. Rare events only: nothing a workload does can make the agent log in
// a loop.
void logmsg(const char *fmt, ...) {
  char line[1024];
  int n = snprintf(line, sizeof line, "strata-agent[%d]: ", (int)getpid());
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof line) n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof line - 1) n = (int)sizeof line - 2;
  line[n++] = '\n';
  ssize_t w = write(2, line, (size_t)n);
  (void)w;
}
