// Minimal tar writer and reader so that directory upload and download need
// nothing from the image (no tar binary, no shell). Writes POSIX ustar with
// PAX extended headers only where ustar cannot hold a value (long paths and
// link targets, sizes >= 8 GiB, large ids, out-of-range mtimes). Reads ustar,
// PAX ('x'; 'g' is ignored) and GNU ('L'/'K' long names, base-256 numbers), so
// archives from GNU tar, bsdtar, Go's archive/tar and tar-stream all work.
//
// Extraction never follows a symlink in a path: every parent is opened with
// O_NOFOLLOW from the target directory down, and ".." components are refused,
// so an archive cannot write outside the directory it is unpacked into.
#include "agent.h"

#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define BLOCK 512
#define MAX_PAX (1u << 20)
#define MAX_LONGNAME (64u * 1024)

struct ustar {
  char name[100], mode[8], uid[8], gid[8], size[12], mtime[12], chksum[8], typeflag, linkname[100];
  char magic[6], version[2], uname[32], gname[32], devmajor[8], devminor[8], prefix[155], pad[12];
};
_Static_assert(sizeof(struct ustar) == BLOCK, "ustar header is one block");

// ---------------------------------------------------------------- writer

struct link_slot {
  dev_t dev;
  ino_t ino;
  char *path;
};

struct tw {
  struct wconn *c;
  struct buf out;         // tar bytes not yet framed
  struct link_slot *links; // hard-link table (open addressing)
  size_t nlinks, caplinks;
  uint8_t *chunk;         // DATA_CHUNK bytes: a file's first read, made before its header
  const char *root;       // the directory archive names are relative to (warnings name full paths)
  char path[8192];        // current relative path
};

// An entry inside the tree that cannot be archived (whole): an R_WARN frame
// naming it, and the archive goes on, as GNU tar warns and goes on. Returns 0
// (or -1 when the client is gone).
static int tw_warn(struct tw *w, int err, const char *name, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int tw_warn(struct tw *w, int err, const char *name, const char *fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  // the path in the sandbox: root/name, without a directory's trailing '/'
  char full[8192 + 4096];
  size_t rl = strlen(w->root);
  snprintf(full, sizeof full, "%s%s%s", w->root, rl && w->root[rl - 1] == '/' ? "" : "/", name);
  size_t fl = strlen(full);
  if (fl > 1 && full[fl - 1] == '/') full[fl - 1] = 0;
  size_t s = frame_begin(&w->c->out, R_WARN);
  if (s == (size_t)-1) return -1;
  int rc = put_u64(&w->c->out, K_ERRNO, (uint64_t)err) | put_str(&w->c->out, K_ERRNAME, errno_name(err)) |
           put_str(&w->c->out, K_MESSAGE, msg) | put_str(&w->c->out, K_PATH, full);
  frame_end(&w->c->out, s);
  if (rc) return -1;
  return w_flush(w->c);
}

static int tw_emit(struct tw *w, bool force) {
  while (buf_pending(&w->out) >= DATA_CHUNK || (force && buf_pending(&w->out))) {
    size_t n = buf_pending(&w->out) < DATA_CHUNK ? buf_pending(&w->out) : DATA_CHUNK;
    size_t s = frame_begin(&w->c->out, R_DATA);
    if (put_raw(&w->c->out, w->out.p + w->out.off, n) < 0) return -1;
    frame_end(&w->c->out, s);
    buf_consume(&w->out, n);
    if (w_flush(w->c) < 0) return -1;
  }
  return 0;
}

static int tw_write(struct tw *w, const void *p, size_t n) {
  if (buf_append(&w->out, p, n) < 0) return -1;
  return tw_emit(w, false);
}

static int tw_pad(struct tw *w, uint64_t size) {
  static const uint8_t zero[BLOCK];
  size_t r = (size_t)(size % BLOCK);
  return r ? tw_write(w, zero, BLOCK - r) : 0;
}

static bool fits_octal(uint64_t v, size_t width) { return width >= 12 || v < (1ull << (3 * (width - 1))); }

static void octal(char *dst, size_t width, uint64_t v) {
  char tmp[32];
  snprintf(tmp, sizeof tmp, "%0*llo", (int)(width - 1), (unsigned long long)v);
  memcpy(dst, tmp, width - 1);
  dst[width - 1] = 0;
}

static void pax_add(struct buf *b, const char *key, const char *val) {
  size_t base = strlen(key) + strlen(val) + 3; // ' ' '=' '\n'
  size_t len = base + 1;
  for (;;) { // the length counts its own digits
    char d[24];
    int nd = snprintf(d, sizeof d, "%zu", len);
    if (base + (size_t)nd == len) break;
    len = base + (size_t)nd;
  }
  char head[32];
  int hn = snprintf(head, sizeof head, "%zu ", len);
  buf_append(b, head, (size_t)hn);
  buf_append(b, key, strlen(key));
  buf_append(b, "=", 1);
  buf_append(b, val, strlen(val));
  buf_append(b, "\n", 1);
}

static void checksum(struct ustar *h) {
  memset(h->chksum, ' ', sizeof h->chksum);
  unsigned sum = 0;
  const uint8_t *p = (const uint8_t *)h;
  for (int i = 0; i < BLOCK; i++) sum += p[i];
  snprintf(h->chksum, sizeof h->chksum, "%06o", sum);
  h->chksum[7] = ' ';
}

static void fill_header(struct ustar *h, const char *name, char type, uint64_t size, uint64_t mode, uint64_t uid,
                        uint64_t gid, int64_t mtime, const char *link, unsigned maj, unsigned min) {
  memset(h, 0, sizeof *h);
  size_t nl = strlen(name);
  if (nl <= sizeof h->name) memcpy(h->name, name, nl);
  else {
    // ustar split: prefix (<= 155) '/' name (<= 100)
    const char *cut = NULL;
    for (const char *s = name + nl - 1; s > name; s--) {
      if (*s != '/') continue;
      if ((size_t)(s - name) <= sizeof h->prefix && (size_t)(name + nl - s - 1) <= sizeof h->name && s[1]) { cut = s; break; }
    }
    if (cut) {
      memcpy(h->prefix, name, (size_t)(cut - name));
      memcpy(h->name, cut + 1, (size_t)(name + nl - cut - 1));
    } else memcpy(h->name, name, sizeof h->name); // the PAX path record holds the real one
  }
  octal(h->mode, 8, mode & 07777);
  octal(h->uid, 8, fits_octal(uid, 8) ? uid : 0);
  octal(h->gid, 8, fits_octal(gid, 8) ? gid : 0);
  octal(h->size, 12, fits_octal(size, 12) ? size : 0);
  octal(h->mtime, 12, mtime >= 0 && fits_octal((uint64_t)mtime, 12) ? (uint64_t)mtime : 0);
  h->typeflag = type;
  if (link) memcpy(h->linkname, link, strlen(link) < sizeof h->linkname ? strlen(link) : sizeof h->linkname);
  memcpy(h->magic, "ustar", 6);
  memcpy(h->version, "00", 2);
  octal(h->devmajor, 8, maj);
  octal(h->devminor, 8, min);
  checksum(h);
}

static bool fits_name(const char *name) {
  size_t nl = strlen(name);
  if (nl <= 100) return true;
  for (const char *s = name + nl - 1; s > name; s--)
    if (*s == '/' && (size_t)(s - name) <= 155 && (size_t)(name + nl - s - 1) <= 100 && s[1]) return true;
  return false;
}

static int tw_entry(struct tw *w, const char *name, char type, const struct stat *st, uint64_t size, const char *link) {
  struct buf pax = { 0 };
  char num[64];
  if (!fits_name(name)) pax_add(&pax, "path", name);
  if (link && strlen(link) > 100) pax_add(&pax, "linkpath", link);
  if (!fits_octal(size, 12)) { snprintf(num, sizeof num, "%llu", (unsigned long long)size); pax_add(&pax, "size", num); }
  if (!fits_octal(st->st_uid, 8)) { snprintf(num, sizeof num, "%u", (unsigned)st->st_uid); pax_add(&pax, "uid", num); }
  if (!fits_octal(st->st_gid, 8)) { snprintf(num, sizeof num, "%u", (unsigned)st->st_gid); pax_add(&pax, "gid", num); }
  int64_t mt = (int64_t)st->st_mtim.tv_sec;
  if (mt < 0 || !fits_octal((uint64_t)mt, 12)) { snprintf(num, sizeof num, "%lld", (long long)mt); pax_add(&pax, "mtime", num); }
  struct ustar h;
  int rc = 0;
  if (buf_pending(&pax)) {
    char pname[100];
    const char *b = strrchr(name, '/');
    b = b && b[1] ? b + 1 : name;
    snprintf(pname, sizeof pname, "PaxHeaders/%.80s", b);
    fill_header(&h, pname, 'x', buf_pending(&pax), 0644, 0, 0, mt > 0 ? mt : 0, NULL, 0, 0);
    rc = tw_write(w, &h, BLOCK);
    if (!rc) rc = tw_write(w, pax.p + pax.off, buf_pending(&pax));
    if (!rc) rc = tw_pad(w, buf_pending(&pax));
  }
  buf_free(&pax);
  if (rc) return rc;
  bool dev = S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode);
  fill_header(&h, name, type, size, st->st_mode, st->st_uid, st->st_gid, mt, link, dev ? major(st->st_rdev) : 0,
              dev ? minor(st->st_rdev) : 0);
  return tw_write(w, &h, BLOCK);
}

static size_t link_hash(dev_t d, ino_t i, size_t cap) {
  uint64_t x = (uint64_t)d * 0x9e3779b97f4a7c15ull ^ (uint64_t)i;
  x ^= x >> 29;
  return (size_t)(x * 0xbf58476d1ce4e5b9ull) & (cap - 1);
}

// Returns the first path recorded for (dev, ino); records `path` if none and `record`.
static const char *link_seen(struct tw *w, dev_t d, ino_t i, const char *path, bool record) {
  if (w->nlinks * 2 >= w->caplinks) {
    size_t nc = w->caplinks ? w->caplinks * 2 : 256;
    struct link_slot *n = calloc(nc, sizeof *n);
    if (!n) return NULL;
    for (size_t k = 0; k < w->caplinks; k++) {
      if (!w->links[k].path) continue;
      size_t j = link_hash(w->links[k].dev, w->links[k].ino, nc);
      while (n[j].path) j = (j + 1) & (nc - 1);
      n[j] = w->links[k];
    }
    free(w->links);
    w->links = n;
    w->caplinks = nc;
  }
  size_t j = link_hash(d, i, w->caplinks);
  while (w->links[j].path) {
    if (w->links[j].dev == d && w->links[j].ino == i) return w->links[j].path;
    j = (j + 1) & (w->caplinks - 1);
  }
  if (!record) return NULL;
  w->links[j] = (struct link_slot){ d, i, strdup(path) };
  if (w->links[j].path) w->nlinks++;
  return NULL;
}

// Zeros in place of `left` bytes a file no longer gave (it shrank, or a read failed).
static int tw_zeros(struct tw *w, uint64_t left) {
  while (left) {
    if (buf_reserve(&w->out, DATA_CHUNK) < 0) return -1;
    size_t n = left < DATA_CHUNK ? (size_t)left : DATA_CHUNK;
    memset(w->out.p + w->out.len, 0, n);
    w->out.len += n;
    left -= n;
    if (tw_emit(w, false) < 0) return -1;
  }
  return 0;
}

// A regular file. Its first DATA_CHUNK bytes are read before its header:
// a file that ends within them is archived with the length it had (so a /proc
// or /sys file comes with its contents, not with stat's 0 or 4096 bytes), a
// larger one with the larger of its size at stat and DATA_CHUNK (cut there if
// it grows: a /proc file of stat size 0 comes with its first DATA_CHUNK bytes;
// padded with zeros, with a warning, if it shrinks or a later read fails: the
// header is out).
// Inside a tree (`in_tree`) a file that cannot be opened or read at all is
// skipped with a warning, and one whose first read fails part-way is archived
// up to there, also with a warning. The single file of a request fails it.
static int tw_file(struct tw *w, int dfd, const char *leaf, const char *name, const struct stat *st, bool in_tree) {
  if (st->st_nlink > 1) {
    const char *first = link_seen(w, st->st_dev, st->st_ino, name, false);
    if (first) return tw_entry(w, name, '1', st, 0, first);
  }
  int fd = openat(dfd, leaf, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    int e = errno;
    if (!in_tree) { w_error(w->c, e, name, "open %s: %s", name, strerror(e)); return -1; }
    if (e == ENOENT) return 0; // removed meanwhile
    return tw_warn(w, e, name, "cannot open: %s; skipped", strerror(e));
  }
  size_t got = 0;
  bool eof = false;
  int err = 0;
  while (got < DATA_CHUNK) {
    ssize_t n = read(fd, w->chunk + got, DATA_CHUNK - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) { err = errno; break; }
    if (n == 0) { eof = true; break; }
    got += (size_t)n;
  }
  if (err && (got == 0 || !in_tree)) {
    close(fd);
    if (!in_tree) { w_error(w->c, err, name, "read %s: %s", name, strerror(err)); return -1; }
    return tw_warn(w, err, name, "cannot read: %s; skipped", strerror(err));
  }
  uint64_t size = (uint64_t)st->st_size;
  if (eof || err) size = got; // all it holds (or all it gave)
  // more than stat said, and no end within the first read: a pseudo file larger than DATA_CHUNK (stat
  // size 0: /proc/kallsyms, a big /proc/PID/environ) or a file that grew. Cutting at stat's size
  // archived such a /proc file empty; what was read is archived, as `sandbox cp` of the single file
  // reads max(size at stat, 64 KiB)
  else if (size < got) size = got;
  if (st->st_nlink > 1) link_seen(w, st->st_dev, st->st_ino, name, true);
  if (tw_entry(w, name, '0', st, size, NULL) < 0 || tw_write(w, w->chunk, got) < 0) { close(fd); return -1; }
  if (err && tw_warn(w, err, name, "read error after %zu bytes: %s; only those are archived", got, strerror(err)) < 0) { close(fd); return -1; }
  uint64_t left = size - (uint64_t)got;
  while (left) {
    if (buf_reserve(&w->out, DATA_CHUNK) < 0) { close(fd); return -1; }
    size_t want = left < DATA_CHUNK ? (size_t)left : DATA_CHUNK;
    ssize_t n = read(fd, w->out.p + w->out.len, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) { err = errno; break; }
    if (n == 0) break;
    w->out.len += (size_t)n;
    left -= (uint64_t)n;
    if (tw_emit(w, false) < 0) { close(fd); return -1; }
  }
  close(fd);
  if (left) {
    // the header promised `size` bytes: the rest are zeros, as GNU tar pads
    uint64_t at = size - left;
    if (tw_zeros(w, left) < 0) return -1;
    int rc = err ? tw_warn(w, err, name, "read error at byte %llu of %llu: %s; the rest is zeros", (unsigned long long)at, (unsigned long long)size, strerror(err))
                 : tw_warn(w, EIO, name, "shrank from %llu to %llu bytes while archived; padded with zeros", (unsigned long long)size, (unsigned long long)at);
    if (rc < 0) return -1;
  }
  return tw_pad(w, size);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// Archives the contents of directory dfd under w->path (length plen), sorted
// by name so the same tree always gives the same archive.
static int tw_dir(struct tw *w, int dfd, size_t plen, int depth) {
  if (depth > 1024) { w_error(w->c, ELOOP, w->path, "directory tree too deep"); return -1; }
  int dup_fd = dup(dfd);
  DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
  if (!d) {
    int e = errno;
    if (dup_fd >= 0) close(dup_fd);
    if (depth == 0) { w_error(w->c, e, w->path, "opendir: %s", strerror(e)); return -1; }
    return tw_warn(w, e, w->path, "cannot read the directory: %s; its contents are skipped", strerror(e));
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char **nn = realloc(names, cap * sizeof *nn);
      if (!nn) break;
      names = nn;
    }
    if (!(names[n] = strdup(de->d_name))) break;
    n++;
  }
  closedir(d);
  qsort(names, n, sizeof *names, cmp_str);
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    const char *leaf = names[i];
    size_t ll = strlen(leaf);
    if (plen + ll + 2 >= sizeof w->path) { w_error(w->c, ENAMETOOLONG, w->path, "path too long"); rc = -1; break; }
    memcpy(w->path + plen, leaf, ll + 1);
    struct stat st;
    if (fstatat(dfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno != ENOENT) rc = tw_warn(w, errno, w->path, "cannot stat: %s; skipped", strerror(errno));
      continue; // ENOENT: removed meanwhile
    }
    if (S_ISDIR(st.st_mode)) {
      w->path[plen + ll] = '/';
      w->path[plen + ll + 1] = 0;
      rc = tw_entry(w, w->path, '5', &st, 0, NULL);
      if (rc) break;
      int sub = openat(dfd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        // its entry is archived (an empty directory), its contents cannot be
        if (errno != ENOENT) rc = tw_warn(w, errno, w->path, "cannot open the directory: %s; its contents are skipped", strerror(errno));
        continue;
      }
      rc = tw_dir(w, sub, plen + ll + 1, depth + 1);
      close(sub);
    } else if (S_ISREG(st.st_mode)) {
      rc = tw_file(w, dfd, leaf, w->path, &st, true);
    } else if (S_ISLNK(st.st_mode)) {
      char target[4096];
      ssize_t tl = readlinkat(dfd, leaf, target, sizeof target - 1);
      if (tl < 0) {
        if (errno != ENOENT) rc = tw_warn(w, errno, w->path, "cannot read the link: %s; skipped", strerror(errno));
        continue;
      }
      target[tl] = 0;
      rc = tw_entry(w, w->path, '2', &st, 0, target);
    } else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISFIFO(st.st_mode)) {
      rc = tw_entry(w, w->path, S_ISCHR(st.st_mode) ? '3' : S_ISBLK(st.st_mode) ? '4' : '6', &st, 0, NULL);
    } // sockets cannot be archived; skipped like GNU tar does
  }
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  w->path[plen] = 0;
  return rc;
}

int tar_get(struct wconn *c, const char *path) {
  struct tw w = { .c = c, .chunk = malloc(DATA_CHUNK) };
  struct stat st;
  int rc;
  if (!w.chunk) { w_error(c, ENOMEM, path, "out of memory"); return -1; }
  if (stat(path, &st) < 0) { w_error(c, errno, path, "stat %s: %s", path, strerror(errno)); return -1; }
  if (S_ISDIR(st.st_mode)) {
    w.root = path;
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) { w_error(c, errno, path, "open %s: %s", path, strerror(errno)); return -1; }
    rc = tw_dir(&w, dfd, 0, 0);
    close(dfd);
  } else {
    // A single file: archived under its base name.
    char *copy = strdup(path);
    if (!copy) return -1;
    char *slash = strrchr(copy, '/');
    const char *leaf = slash ? slash + 1 : copy;
    const char *dir = slash ? (slash == copy ? "/" : (*slash = 0, copy)) : ".";
    w.root = dir;
    snprintf(w.path, sizeof w.path, "%s", leaf);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) { w_error(c, errno, path, "open %s: %s", dir, strerror(errno)); free(copy); return -1; }
    if (S_ISREG(st.st_mode)) rc = tw_file(&w, dfd, leaf, w.path, &st, false);
    else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISFIFO(st.st_mode))
      rc = tw_entry(&w, w.path, S_ISCHR(st.st_mode) ? '3' : S_ISBLK(st.st_mode) ? '4' : '6', &st, 0, NULL);
    else { w_error(c, EINVAL, path, "%s cannot be archived", path); rc = -1; }
    close(dfd);
    free(copy);
  }
  if (!rc) {
    static const uint8_t zero[BLOCK * 2];
    rc = tw_write(&w, zero, sizeof zero);
  }
  if (!rc) rc = tw_emit(&w, true);
  for (size_t i = 0; i < w.caplinks; i++) free(w.links[i].path);
  free(w.links);
  free(w.chunk);
  buf_free(&w.out);
  return rc;
}

// ---------------------------------------------------------------- reader

struct tr {
  struct wconn *c;
  uint8_t *data;
  size_t avail;
  bool eof;
};

// Reads exactly n bytes (dst may be NULL to skip). 0 ok, 1 the stream ended
// before the first byte, -1 error (reported, or the client is gone).
static int tr_read(struct tr *r, void *dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    if (!r->avail) {
      if (r->eof) return got ? -2 : 1;
      ssize_t k = w_read_data(r->c, &r->data);
      if (k < 0) return -1;
      if (k == 0) { r->eof = true; continue; }
      r->avail = (size_t)k;
    }
    size_t take = n - got < r->avail ? n - got : r->avail;
    if (dst) memcpy((uint8_t *)dst + got, r->data, take);
    r->data += take;
    r->avail -= take;
    got += take;
  }
  return 0;
}

static bool parse_num(const char *f, size_t w, uint64_t *out) {
  const uint8_t *p = (const uint8_t *)f;
  if (p[0] & 0x80) { // GNU base-256
    if (p[0] & 0x40) return false; // negative
    uint64_t v = p[0] & 0x3f;
    for (size_t i = 1; i < w; i++) {
      if (v >> 56) return false;
      v = (v << 8) | p[i];
    }
    *out = v;
    return true;
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < w && (p[i] == ' ' || p[i] == 0)) i++;
  if (i == w) { *out = 0; return true; }
  for (; i < w && p[i] >= '0' && p[i] <= '7'; i++) {
    if (v >> 61) return false;
    v = (v << 3) | (uint64_t)(p[i] - '0');
  }
  for (; i < w; i++) if (p[i] != ' ' && p[i] != 0) return false;
  *out = v;
  return true;
}

static bool header_ok(const struct ustar *h) {
  uint64_t want;
  if (!parse_num(h->chksum, sizeof h->chksum, &want)) return false;
  const uint8_t *p = (const uint8_t *)h;
  unsigned long u = 0;
  long s = 0;
  for (int i = 0; i < BLOCK; i++) {
    uint8_t b = (i >= 148 && i < 156) ? ' ' : p[i];
    u += b;
    s += (signed char)b;
  }
  return u == want || (uint64_t)s == want;
}

// Normalises an archive path into "a/b/c": leading '/' and "." parts dropped,
// ".." refused. Returns false for unsafe names.
static bool clean_path(const char *in, char *out, size_t outlen) {
  size_t o = 0;
  const char *p = in;
  while (*p) {
    while (*p == '/') p++;
    const char *e = p;
    while (*e && *e != '/') e++;
    size_t l = (size_t)(e - p);
    if (l == 0) break;
    if (l == 2 && p[0] == '.' && p[1] == '.') return false;
    if (!(l == 1 && p[0] == '.')) {
      if (o + l + 2 > outlen) return false;
      if (o) out[o++] = '/';
      memcpy(out + o, p, l);
      o += l;
    }
    p = e;
  }
  out[o] = 0;
  return true;
}

// Opens the directory holding the last component of rel below rootfd, creating
// missing parents when asked, without following any symlink. *leaf points into
// `rel`, which is modified.
static int open_parent(int rootfd, char *rel, char **leaf, bool create) {
  int fd = dup(rootfd);
  if (fd < 0) return -1;
  char *p = rel;
  for (;;) {
    char *slash = strchr(p, '/');
    if (!slash) { *leaf = p; return fd; }
    *slash = 0;
    int nfd = openat(fd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (nfd < 0 && errno == ENOENT && create) {
      if (mkdirat(fd, p, 0755) < 0 && errno != EEXIST) { int e = errno; close(fd); errno = e; return -1; }
      nfd = openat(fd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    int e = errno;
    *slash = '/';
    close(fd);
    if (nfd < 0) { errno = (e == ELOOP) ? ENOTDIR : e; return -1; }
    fd = nfd;
    p = slash + 1;
  }
}

// Clears the way for a new entry: removes a file or an empty directory there.
static int clear_leaf(int pfd, const char *leaf) {
  if (unlinkat(pfd, leaf, 0) == 0 || errno == ENOENT) return 0;
  if (errno == EISDIR && unlinkat(pfd, leaf, AT_REMOVEDIR) == 0) return 0;
  return -1;
}

struct dirmeta {
  char *rel;
  uint64_t mode, uid, gid;
  int64_t mtime;
};

struct entry {
  char type;
  uint64_t mode, uid, gid, size, maj, min;
  int64_t mtime;
  char *name, *link; // owned
  bool gnu_sparse;   // a PAX GNU.sparse.* record: the data is a sparse map and segments, not the file
};

// Parses PAX records into e (path, linkpath, size, uid, gid, mtime).
static bool parse_pax(const char *p, size_t n, struct entry *e, char **ppath, char **plink) {
  size_t i = 0;
  while (i < n) {
    size_t len = 0, j = i;
    while (j < n && p[j] >= '0' && p[j] <= '9') { len = len * 10 + (size_t)(p[j] - '0'); j++; if (len > n) return false; }
    if (j >= n || p[j] != ' ' || len == 0 || i + len > n || p[i + len - 1] != '\n') return false;
    const char *kv = p + j + 1, *end = p + i + len - 1;
    const char *eq = memchr(kv, '=', (size_t)(end - kv));
    if (!eq) return false;
    size_t kl = (size_t)(eq - kv), vl = (size_t)(end - eq - 1);
    char *val = strndup(eq + 1, vl);
    if (!val) return false;
    if (kl == 4 && !memcmp(kv, "path", 4)) { free(*ppath); *ppath = val; val = NULL; }
    else if (kl == 8 && !memcmp(kv, "linkpath", 8)) { free(*plink); *plink = val; val = NULL; }
    else if (kl == 4 && !memcmp(kv, "size", 4)) e->size = strtoull(val, NULL, 10);
    else if (kl == 3 && !memcmp(kv, "uid", 3)) e->uid = strtoull(val, NULL, 10);
    else if (kl == 3 && !memcmp(kv, "gid", 3)) e->gid = strtoull(val, NULL, 10);
    else if (kl == 5 && !memcmp(kv, "mtime", 5)) e->mtime = strtoll(val, NULL, 10);
    else if (kl > 11 && !memcmp(kv, "GNU.sparse.", 11)) e->gnu_sparse = true;
    free(val);
    i += len;
  }
  return true;
}

static int read_blob(struct tr *r, uint64_t size, uint64_t max, char **out) {
  if (size > max) { w_error(r->c, EINVAL, NULL, "archive header data too large (%llu bytes)", (unsigned long long)size); return -1; }
  char *b = malloc((size_t)size + 1);
  if (!b) return -1;
  int rc = tr_read(r, b, (size_t)size);
  if (!rc) rc = tr_read(r, NULL, (size_t)((BLOCK - size % BLOCK) % BLOCK));
  if (rc) { free(b); if (rc > 0 || rc == -2) w_error(r->c, EINVAL, NULL, "archive truncated"); return -1; }
  b[size] = 0;
  *out = b;
  return 0;
}

static int apply_meta(int pfd, const char *leaf, int fd, const struct entry *e, uint64_t flags, bool is_link) {
  if ((flags & TARPUT_OWNER) && geteuid() == 0) {
    if (fd >= 0) { if (fchown(fd, (uid_t)e->uid, (gid_t)e->gid) < 0) return -1; }
    else if (fchownat(pfd, leaf, (uid_t)e->uid, (gid_t)e->gid, AT_SYMLINK_NOFOLLOW) < 0) return -1;
  }
  if (!is_link) {
    if (fd >= 0) { if (fchmod(fd, (mode_t)(e->mode & 07777)) < 0) return -1; }
    else if (fchmodat(pfd, leaf, (mode_t)(e->mode & 07777), 0) < 0) return -1;
  }
  struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_sec = (time_t)e->mtime } };
  if (fd >= 0) futimens(fd, ts);
  else utimensat(pfd, leaf, ts, AT_SYMLINK_NOFOLLOW);
  return 0;
}

static int extract(struct tr *r, int rootfd, struct entry *e, uint64_t flags, struct dirmeta **dirs, size_t *ndirs) {
  char rel[8192], trel[8192];
  const char *name = e->name;
  if (!clean_path(name, rel, sizeof rel)) { w_error(r->c, EINVAL, name, "unsafe path in archive: %s", name); return -1; }
  uint64_t data = (e->type == '0' || e->type == 0 || e->type == '7') ? e->size : 0;
  if (!rel[0]) return tr_read(r, NULL, (size_t)(data + (BLOCK - data % BLOCK) % BLOCK)) ? -1 : 0; // the root itself
  char *leaf;
  int pfd = open_parent(rootfd, rel, &leaf, true);
  if (pfd < 0) { w_error(r->c, errno, name, "%s: a parent is missing, not a directory or a symlink", name); return -1; }
  int fd = -1, rc = 0, err = 0;
  const char *op = "create";
  switch (e->type) {
    case '0': case 0: case '7':
      if (clear_leaf(pfd, leaf) < 0) { err = errno; break; }
      fd = openat(pfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0) { err = errno; break; }
      struct sparse sw; // runs of zeros become holes again
      sparse_init(&sw, fd, true);
      for (uint64_t left = e->size; left && !rc;) {
        if (!r->avail && !r->eof) {
          ssize_t k = w_read_data(r->c, &r->data);
          if (k < 0) { close(fd); close(pfd); return -1; }
          if (k == 0) r->eof = true;
          else r->avail = (size_t)k;
        }
        if (!r->avail) { w_error(r->c, EINVAL, name, "archive truncated inside %s", name); close(fd); close(pfd); return -1; }
        size_t take = left < r->avail ? (size_t)left : r->avail;
        if (sparse_write(&sw, r->data, take) < 0) { err = errno; op = "write"; rc = -1; }
        r->data += take;
        r->avail -= take;
        left -= take;
      }
      if (rc) break;
      if (sparse_finish(&sw) < 0) { err = errno; op = "write"; break; }
      data = 0;
      if (tr_read(r, NULL, (size_t)((BLOCK - e->size % BLOCK) % BLOCK))) { w_error(r->c, EINVAL, name, "archive truncated"); close(fd); close(pfd); return -1; }
      if (apply_meta(pfd, leaf, fd, e, flags, false) < 0) { err = errno; op = "set attributes of"; }
      break;
    case '5': {
      struct stat st;
      if (fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode) && clear_leaf(pfd, leaf) < 0) { err = errno; break; }
      if (mkdirat(pfd, leaf, 0700) < 0 && errno != EEXIST) { err = errno; break; }
      // Mode, owner and mtime of directories are applied after everything
      // inside them was written (a 0555 directory would refuse its contents).
      struct dirmeta *nd = realloc(*dirs, (*ndirs + 1) * sizeof *nd);
      if (!nd) { err = ENOMEM; break; }
      *dirs = nd;
      nd[*ndirs] = (struct dirmeta){ strdup(rel), e->mode, e->uid, e->gid, e->mtime }; // open_parent restored rel
      if (nd[*ndirs].rel) (*ndirs)++;
      break;
    }
    case '2':
      if (clear_leaf(pfd, leaf) < 0) { err = errno; break; }
      if (symlinkat(e->link ? e->link : "", pfd, leaf) < 0) { err = errno; break; }
      if (apply_meta(pfd, leaf, -1, e, flags, true) < 0) { err = errno; op = "set attributes of"; }
      break;
    case '1': {
      if (!e->link || !clean_path(e->link, trel, sizeof trel) || !trel[0]) { w_error(r->c, EINVAL, name, "unsafe hard link target in archive: %s", e->link ? e->link : ""); close(pfd); return -1; }
      char *tleaf;
      int tfd = open_parent(rootfd, trel, &tleaf, false);
      if (tfd < 0) { err = errno; op = "link"; break; }
      if (clear_leaf(pfd, leaf) < 0 || linkat(tfd, tleaf, pfd, leaf, 0) < 0) { err = errno; op = "link"; }
      close(tfd);
      break;
    }
    case '3': case '4': case '6': {
      if (clear_leaf(pfd, leaf) < 0) { err = errno; break; }
      mode_t m = (mode_t)(e->mode & 07777) | (e->type == '3' ? S_IFCHR : e->type == '4' ? S_IFBLK : S_IFIFO);
      if (mknodat(pfd, leaf, m, makedev((unsigned)e->maj, (unsigned)e->min)) < 0) { err = errno; break; }
      if (apply_meta(pfd, leaf, -1, e, flags, false) < 0) { err = errno; op = "set attributes of"; }
      break;
    }
    default:
      break; // unknown entry types are skipped with their data
  }
  if (fd >= 0) close(fd);
  close(pfd);
  if (err) { w_error(r->c, err, name, "%s %s: %s", op, name, strerror(err)); return -1; }
  if (data && tr_read(r, NULL, (size_t)(data + (BLOCK - data % BLOCK) % BLOCK))) {
    w_error(r->c, EINVAL, name, "archive truncated");
    return -1;
  }
  return 0;
}

int tar_put(struct wconn *c, const char *path, uint64_t flags) {
  if (mkdir_p(path, 0755) < 0) { w_error(c, errno, path, "mkdir -p %s: %s", path, strerror(errno)); return -1; }
  int rootfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0) { w_error(c, errno, path, "open %s: %s", path, strerror(errno)); return -1; }
  struct tr r = { .c = c };
  struct dirmeta *dirs = NULL;
  size_t ndirs = 0;
  char *pax_path = NULL, *pax_link = NULL, *gnu_name = NULL, *gnu_link = NULL;
  struct entry pax = { 0 };
  bool have_pax = false;
  uint64_t count = 0;
  int zeros = 0, rc = 0;
  for (;;) {
    struct ustar h;
    int k = tr_read(&r, &h, BLOCK);
    if (k == 1) break; // clean end without the two zero blocks: accepted
    if (k) { if (k == -2) w_error(c, EINVAL, NULL, "archive truncated"); rc = -1; break; }
    static const uint8_t zero[BLOCK];
    if (!memcmp(&h, zero, BLOCK)) { if (++zeros == 2) break; continue; }
    zeros = 0;
    if (!header_ok(&h)) { w_error(c, EINVAL, NULL, "bad tar header checksum (not a tar archive?)"); rc = -1; break; }
    struct entry e = { .type = h.typeflag };
    bool ok = parse_num(h.mode, 8, &e.mode) && parse_num(h.uid, 8, &e.uid) && parse_num(h.gid, 8, &e.gid) &&
              parse_num(h.size, 12, &e.size) && parse_num(h.devmajor, 8, &e.maj) && parse_num(h.devminor, 8, &e.min);
    uint64_t mt = 0;
    ok = ok && parse_num(h.mtime, 12, &mt);
    if (!ok) { w_error(c, EINVAL, NULL, "bad numeric field in tar header"); rc = -1; break; }
    e.mtime = (int64_t)mt;
    if (e.type == 'x' || e.type == 'g' || e.type == 'L' || e.type == 'K') {
      char *blob;
      if (read_blob(&r, e.size, e.type == 'x' || e.type == 'g' ? MAX_PAX : MAX_LONGNAME, &blob) < 0) { rc = -1; break; }
      if (e.type == 'x') {
        have_pax = true;
        if (!parse_pax(blob, (size_t)e.size, &pax, &pax_path, &pax_link)) { free(blob); w_error(c, EINVAL, NULL, "malformed PAX header"); rc = -1; break; }
        free(blob);
      } else if (e.type == 'L') { free(gnu_name); gnu_name = blob; }
      else if (e.type == 'K') { free(gnu_link); gnu_link = blob; }
      else free(blob);
      continue;
    }
    if (have_pax) {
      if (pax.size) e.size = pax.size;
      if (pax.uid) e.uid = pax.uid;
      if (pax.gid) e.gid = pax.gid;
      if (pax.mtime) e.mtime = pax.mtime;
    }
    if (e.type == 'S' || (have_pax && pax.gnu_sparse)) {
      // unpacked as it is, its data would be a sparse map and segments, not the file
      w_error(c, EINVAL, pax_path ? pax_path : gnu_name ? gnu_name : h.name,
              "GNU sparse archive entries (tar --sparse) are not supported: archive without --sparse (runs of zeros become holes here anyway)");
      rc = -1;
      break;
    }
    char namebuf[512];
    bool posix = !memcmp(h.magic, "ustar", 6) || !memcmp(h.magic, "ustar\0", 6);
    if (posix && h.prefix[0]) snprintf(namebuf, sizeof namebuf, "%.155s/%.100s", h.prefix, h.name);
    else snprintf(namebuf, sizeof namebuf, "%.100s", h.name);
    char linkbuf[101];
    snprintf(linkbuf, sizeof linkbuf, "%.100s", h.linkname);
    e.name = pax_path ? pax_path : gnu_name ? gnu_name : namebuf;
    e.link = pax_link ? pax_link : gnu_link ? gnu_link : linkbuf;
    rc = extract(&r, rootfd, &e, flags, &dirs, &ndirs);
    free(pax_path); free(pax_link); free(gnu_name); free(gnu_link);
    pax_path = pax_link = gnu_name = gnu_link = NULL;
    memset(&pax, 0, sizeof pax);
    have_pax = false;
    if (rc) break;
    count++;
  }
  free(pax_path); free(pax_link); free(gnu_name); free(gnu_link);
  // Directory attributes, deepest first.
  for (size_t i = ndirs; i-- > 0;) {
    if (!rc) {
      char *leaf;
      int pfd = open_parent(rootfd, dirs[i].rel, &leaf, false);
      if (pfd >= 0) {
        struct entry e = { .mode = dirs[i].mode, .uid = dirs[i].uid, .gid = dirs[i].gid, .mtime = dirs[i].mtime };
        if (apply_meta(pfd, leaf, -1, &e, flags, false) < 0) {
          w_error(c, errno, dirs[i].rel, "set attributes of %s: %s", dirs[i].rel, strerror(errno));
          rc = -1;
        }
        close(pfd);
      }
    }
    free(dirs[i].rel);
  }
  free(dirs);
  close(rootfd);
  if (rc) return -1;
  // Drain anything after the end-of-archive marker (record padding).
  while (!r.eof) {
    ssize_t k = w_read_data(c, &r.data);
    if (k < 0) return -1;
    if (k == 0) r.eof = true;
  }
  size_t st = frame_begin(&c->out, R_DONE);
  put_u64(&c->out, K_BYTES, count);
  frame_end(&c->out, st);
  return w_flush(c);
}
