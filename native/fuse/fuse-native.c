// Strata's build of fuse-native's addon: fuse-native 2.2.6 (MIT License,
// https://github.com/fuse-friends/fuse-native) with nine changes, marked
// "Strata:" below.
//
// 1. libfuse's multithreaded loop starts a worker thread whenever none is idle
// and ends workers while more than 10 are idle, so a mount under parallel
// load creates and ends threads all the time (~770 for one 1 GiB sequential
// read with 12 READs in flight). fuse-native gave every new thread its own
// thread-locals block with its own uv_async handle on the main loop and never
// released them, and libuv scans every async handle on each wakeup: the
// daemon's main thread spent 15-27% of its time in uv__async_io after a few
// reads, growing with every thread ever started. Here a thread's block goes
// back to its mount's free list when the thread ends and the next new thread
// takes it, so the handles stay as many as the threads alive at once.
//
// 2. Reads served by libfuse's own threads. Every READ used to be a round
// trip into the event loop and back (uv_async_send, the JavaScript callback,
// a semaphore), even when the daemon's read-ahead already held the bytes: on
// this 2-CPU VM that hop, not the copy, bounded a sequential reader. The
// daemon now registers each read-ahead chunk it holds (file handle, file
// offset, its Buffer, how long it may be served) in a per-mount table; a READ
// that one registered chunk wholly covers is copied out of it by the libfuse
// thread that received it and answered at once. Everything else goes to
// JavaScript as before. The table is read under a shared lock, so a chunk
// the daemon takes back (strata_ra_take, under the exclusive lock) is never
// being copied from once that call returns; the daemon learns how much each
// chunk served (to let it go and to read further ahead) from a coalesced
// async notification sent when a chunk serves its first bytes here and when
// what was served here completes it.
//
// 3. utimens passed the atime as both times, so `touch -m -d`, `cp -a` and
// `tar -x` could not set a file's mtime through the mount; and with
// flag_utime_omit_ok unset libfuse 2 dropped a request that sets one time
// alone. Each time now arrives as itself, UTIME_OMIT as a value of its own.
//
// 4. Names reached JavaScript through napi_create_string_utf8, which replaces
// every invalid UTF-8 sequence with U+FFFD: b'c\xff' and b'c\xfe' both became
// "c\uFFFD", so creating the second replaced the first. Strata's names are
// UTF-8 strings (meta stores strings), so a path, second path (rename, link),
// symlink target or xattr name that is not valid UTF-8 is refused with EILSEQ
// before the request leaves the libfuse thread; xattr values are bytes and are
// not checked.
//
// 5. Requests of up to 1 MiB. libfuse 2.9 speaks FUSE protocol 7.19 and never
// offers FUSE_MAX_PAGES (7.28), so the kernel split every READ and WRITE into
// 128 KiB (32 pages): a 1 MiB sequential read was 8 READs, each a wakeup of a
// libfuse thread, a request parsed and a reply written. The mount's channel
// is Strata's own (the same /dev/fuse descriptor, libfuse's receive and send
// done here) so that the INIT reply can carry FUSE_MAX_PAGES with 256 pages
// when the kernel offers it; the mount options max_read and max_write still
// bound each request (fs/fuse/config.ts sets them), and libfuse's receive
// buffers are sized for a 1 MiB WRITE.
//
// 6. Times crossed as ms since the epoch in an unsigned number: sub-ms parts
// were lost, times before 1970 wrapped, and utimens's UTIME_NOW became ~1 s
// after the epoch, so the JavaScript side took the real times 0 and 1 s for
// "now" (`tar --mtime=@0` extracted files with the current time). A time now
// crosses as µs since the epoch plus 2^52, with UTIME_OMIT and UTIME_NOW as
// values of their own (fs/fuse/times.ts says the same on the other side).
//
// 7. st_ino was a 32-bit field, too small for 3FS inode ids, so the mount ran
// without use_ino and libfuse numbered each name itself: two hard links of a
// file had different st_ino, and every tool that finds hard links by
// (st_dev, st_ino) saw separate files (git clone of a repository on the mount
// failed, rsync -H left its temporary links behind, tar and cp -a copied each
// link's data). The slot fuse-native calls dev (the kernel fills in st_dev
// itself) now carries the high 32 bits, and the mount uses use_ino: st_ino
// is the 3FS inode id (fs/fuse/ops.ts inoFields).
//
// 8. A directory held open was reached by its name. libfuse 2's high-level
// API hands every request a path built from the names of the kernel's nodes,
// and calls getattr for the kernel's LOOKUP of a name and for its GETATTR of
// a node it holds alike, and readdir without the handle opendir returned.
// After another client renamed a directory (or replaced it by a file), the
// daemon could not tell "what is at this name now" from "what is the node
// the kernel holds, which it knows by this name": a process's working
// directory or an opendir descriptor then listed and stat'ed whatever was at
// the old name (ENOENT, or EIO once the kernel saw another type). Each
// libfuse thread now notes the opcode of the request it received
// (strata_chan_receive), getattr tells JavaScript whether it answers a
// question about a held node or about a name, and readdir passes the
// directory's handle (fs/fuse/ops.ts keeps open directories by inode id).
//
// 9. libfuse 2's node table is keyed by (parent node, name): a node the kernel
// still holds (a working directory, a directory descriptor) keeps its name
// there, so when another client had moved that directory away and put a new
// one at its name, the kernel's next LOOKUP of the name was answered with the
// held node's id, and the process's working directory turned into the new
// directory; a file at the name made the kernel mark the held directory bad
// (EIO). The high-level API cannot rename a node itself, but libfuse's own
// rename of its table can be driven through its public request path: when
// the daemon answers a LOOKUP's getattr with a name to move the node to
// (fs/fuse/ops.ts: a name no kernel request can carry), the libfuse thread,
// once the LOOKUP has let go of its path locks and before its reply reaches
// the kernel, hands libfuse a RENAME request of (parent, name) to that name
// under the root (fuse_session_process, answered on a channel of its own and
// by no filesystem call: strata_rename). The reply (ESTALE) makes the kernel
// look the name up again, and libfuse gives it a new node; the held node goes
// on answering, under its new name, for the directory it was. Until the move
// is made, another LOOKUP of that name is answered ESTALE here (it would get
// the old node), and the daemon asks (strata_detach_pending) whether a request
// by the old name is still about the held node.

#define FUSE_USE_VERSION 29

#include <uv.h>
#include <node_api.h>
#include <napi-macros.h>

#include <string.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <assert.h>

#include <fuse.h>
#include <fuse_opt.h>
#include <fuse_common.h>
#include <fuse_lowlevel.h>
#include <fuse_kernel.h>

#include <unistd.h>
#include <sys/wait.h>
#include <sys/uio.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

static int IS_ARRAY_BUFFER_DETACH_SUPPORTED = 0;

napi_status napi_detach_arraybuffer(napi_env env, napi_value buf);

// Strata: whether s is well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), the same rule V8 decodes by; NULL is
// fine (no name in that field). Change 4 at the top.
static int strata_utf8_ok (const char *s) {
  if (s == NULL) return 1;
  const unsigned char *p = (const unsigned char *) s;
  while (*p) {
    unsigned char c = *p;
    if (c < 0x80) { p++; continue; }
    int n;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) n = 1;
    else if (c == 0xe0) { n = 2; lo = 0xa0; }
    else if (c == 0xed) { n = 2; hi = 0x9f; }
    else if (c >= 0xe1 && c <= 0xef) n = 2;
    else if (c == 0xf0) { n = 3; lo = 0x90; }
    else if (c >= 0xf1 && c <= 0xf3) n = 3;
    else if (c == 0xf4) { n = 3; hi = 0x8f; }
    else return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i <= n; i++) if (p[i] < 0x80 || p[i] > 0xbf) return 0;
    p += n + 1;
  }
  return 1;
}

#define FUSE_NATIVE_CALLBACK(fn, blk)\
  napi_env env = ft->env;\
  napi_handle_scope scope;\
  napi_open_handle_scope(env, &scope);\
  napi_value ctx;\
  napi_get_reference_value(env, ft->ctx, &ctx);\
  napi_value callback;\
  napi_get_reference_value(env, fn, &callback);\
  blk\
  napi_close_handle_scope(env, scope);

// Strata: the fields a request's names travel in are cleared first (thread
// locals are reused across requests), and a request whose path, second path,
// symlink target or xattr name is not valid UTF-8 is answered -EILSEQ here,
// before anything reaches JavaScript (change 4 at the top).
#define FUSE_NATIVE_HANDLER(opname, blk)\
  fuse_thread_locals_t *l = get_thread_locals();\
  l->op = op_##opname;\
  l->op_fn = fuse_native_dispatch_##opname;\
  l->path = NULL;\
  l->dest = NULL;\
  l->name = NULL;\
  blk\
  if (!strata_names_ok(l)) return -EILSEQ;\
  uv_async_send(&(l->async));\
  uv_sem_wait(&(l->sem));\
  return l->res;

#define FUSE_METHOD(name, callbackArgs, signalArgs, signature, callBlk, callbackBlk, signalBlk)\
  static void fuse_native_dispatch_##name (uv_async_t* handle, fuse_thread_locals_t* l, fuse_thread_t* ft) {\
    uint32_t op = op_##name;\
    FUSE_NATIVE_CALLBACK(ft->handlers[op], {\
      napi_value argv[callbackArgs + 2];\
      napi_get_reference_value(env, l->self, &(argv[0]));\
      napi_create_uint32(env, l->op, &(argv[1]));\
      callbackBlk\
      NAPI_MAKE_CALLBACK(env, NULL, ctx, callback, callbackArgs + 2, argv, NULL)\
    })\
  }\
  NAPI_METHOD(fuse_native_signal_##name) {\
    NAPI_ARGV(signalArgs + 2)\
    NAPI_ARGV_BUFFER_CAST(fuse_thread_locals_t *, l, 0);\
    NAPI_ARGV_INT32(res, 1);\
    signalBlk\
    l->res = res;\
    uv_sem_post(&(l->sem));\
    return NULL;\
  }\
  static int fuse_native_##name signature {\
    FUSE_NATIVE_HANDLER(name, callBlk)\
  }

#define FUSE_METHOD_VOID(name, callbackArgs, signalArgs, signature, callBlk, callbackBlk)\
  FUSE_METHOD(name, callbackArgs, signalArgs, signature, callBlk, callbackBlk, {})

#define FUSE_UINT64_TO_INTS_ARGV(n, pos)\
  uint32_t low##pos = n % 4294967296;\
  uint32_t high##pos = (n - low##pos) / 4294967296;\
  napi_create_uint32(env, low##pos, &(argv[pos]));\
  napi_create_uint32(env, high##pos, &(argv[pos + 1]));


// Opcodes

static const uint32_t op_init = 0;
static const uint32_t op_error = 1;
static const uint32_t op_access = 2;
static const uint32_t op_statfs = 3;
static const uint32_t op_fgetattr = 4;
static const uint32_t op_getattr = 5;
static const uint32_t op_flush = 6;
static const uint32_t op_fsync = 7;
static const uint32_t op_fsyncdir = 8;
static const uint32_t op_readdir = 9;
static const uint32_t op_truncate = 10;
static const uint32_t op_ftruncate = 11;
static const uint32_t op_utimens = 12;
static const uint32_t op_readlink = 13;
static const uint32_t op_chown = 14;
static const uint32_t op_chmod = 15;
static const uint32_t op_mknod = 16;
static const uint32_t op_setxattr = 17;
static const uint32_t op_getxattr = 18;
static const uint32_t op_listxattr = 19;
static const uint32_t op_removexattr = 20;
static const uint32_t op_open = 21;
static const uint32_t op_opendir = 22;
static const uint32_t op_read = 23;
static const uint32_t op_write = 24;
static const uint32_t op_release = 25;
static const uint32_t op_releasedir = 26;
static const uint32_t op_create = 27;
static const uint32_t op_unlink = 28;
static const uint32_t op_rename = 29;
static const uint32_t op_link = 30;
static const uint32_t op_symlink = 31;
static const uint32_t op_mkdir = 32;
static const uint32_t op_rmdir = 33;

// Data structures

// Strata: one registered read-ahead chunk
#define STRATA_RA_SLOTS 256
typedef struct {
  const char *data;      // NULL: the slot is free
  uint64_t fh;
  uint64_t start;        // file offset of data[0]
  uint64_t len;
  uint64_t expires_ns;   // CLOCK_MONOTONIC; not served from then on
  uint64_t served;       // bytes copied out by libfuse threads (atomic)
  uint64_t need;         // served bytes that complete the chunk (the rest went through JavaScript; atomic)
} strata_ra_slot_t;

typedef struct {
  napi_env env;
  pthread_t thread;
  pthread_attr_t attr;
  napi_ref ctx;
  napi_ref malloc;

  // Operation handlers
  napi_ref handlers[35];

  struct fuse *fuse;
  struct fuse_chan *ch;
  char mnt[1024];
  char mntopts[1024];
  int mounted;

  uv_async_t async;
  uv_mutex_t mut;
  uv_sem_t sem;

  // Strata: thread-locals blocks of ended threads, reused by new ones (guarded by free_mut)
  void *free_locals;
  uv_mutex_t free_mut;

  // Strata: read-ahead chunks libfuse threads serve themselves (change 2 above)
  pthread_rwlock_t ra_lock;
  int ra_on;             // set by strata_ra_listen, cleared by strata_ra_stop (under ra_lock)
  uint32_t ra_live;      // slots in use (atomic; lets a READ skip the lock when there are none)
  uint64_t ra_hits;      // READs served here (atomic)
  uint64_t ra_bytes;     // bytes served here (atomic)
  napi_ref ra_cb;
  uv_async_t ra_async;
  strata_ra_slot_t ra[STRATA_RA_SLOTS];

  // Strata: LOOKUPs whose node is being moved (change 9 at the top): entered by the JavaScript thread
  // when it answers one, in the order it answers, left once libfuse moved the node (guarded by
  // detach_mut). Another LOOKUP of that name answered meanwhile would get the node's old id.
  pthread_mutex_t detach_mut;
  struct { uint64_t parent; char *name; char *as; } detaching[16];
} fuse_thread_t;

typedef struct {
  napi_ref self;

  // Opcode
  uint32_t op;
  void *op_fn;

  // Payloads
  const char *path;
  const char *dest;
  char *linkname;
  struct fuse_file_info *info;
  const void *buf;
  off_t offset;
  size_t len;
  mode_t mode;
  dev_t dev;
  uid_t uid;
  gid_t gid;
  size_t atime;
  size_t mtime;
  int32_t res;

  // Extended attributes
  const char *name;
  const char *value;
  char *list;
  size_t size;
  uint32_t position;
  int flags;

  // Stat + Statfs
  struct stat *stat;
  struct statvfs *statvfs;

  // Readdir
  fuse_fill_dir_t readdir_filler;

  // Internal bookkeeping
  fuse_thread_t *fuse;
  uv_sem_t sem;
  uv_async_t async;

  // Strata: next block on the mount's free list
  void *next_free;

  // Strata: the name getattr's answer asks to move the LOOKUP's node to (change 9 at the top; malloc'd),
  // and the LOOKUP's parent and name
  char *detach;
  uint64_t lookup_parent;
  const char *lookup_name;
} fuse_thread_locals_t;

static pthread_key_t thread_locals_key;
static fuse_thread_locals_t* get_thread_locals();

// Strata: every name a request carries is valid UTF-8 (change 4 at the top)
static int strata_names_ok (const fuse_thread_locals_t *l) {
  return strata_utf8_ok(l->path) && strata_utf8_ok(l->dest) && strata_utf8_ok(l->name);
}

// Helpers
// TODO: Extract into a separate file.

static uint64_t uint32s_to_uint64 (uint32_t **ints) {
  uint64_t low = *((*ints)++);
  uint64_t high = *((*ints)++);
  return high * 4294967296 + low;
}

// Strata: a time crosses as µs since the epoch plus 2^52, one exact positive
// JavaScript number for every time from 1827 to 2112, with UTIME_OMIT and
// UTIME_NOW as values of their own above that range (change 6 at the top;
// fs/fuse/times.ts is the other side)
#ifndef UTIME_OMIT
#define UTIME_OMIT ((1l << 30) - 2l)
#endif
#ifndef UTIME_NOW
#define UTIME_NOW ((1l << 30) - 1l)
#endif
#define STRATA_TIME_BIAS 4503599627370496LL  // 2^52
#define STRATA_TIME_OMIT 9007199254740991ULL // 2^53 - 1
#define STRATA_TIME_NOW 9007199254740990ULL  // 2^53 - 2

static void uint32s_to_timespec (struct timespec* ts, uint32_t** ints) {
  int64_t us = (int64_t) uint32s_to_uint64(ints) - STRATA_TIME_BIAS;
  int64_t sec = us / 1000000;
  int64_t rem = us % 1000000;
  if (rem < 0) {
    rem += 1000000;
    sec -= 1;
  }
  ts->tv_sec = (time_t) sec;
  ts->tv_nsec = (long) (rem * 1000);
}

static uint64_t utime_to_uint64 (const struct timespec* ts) {
  if (ts->tv_nsec == UTIME_OMIT) return STRATA_TIME_OMIT;
  if (ts->tv_nsec == UTIME_NOW) return STRATA_TIME_NOW;
  const int64_t max_us = (int64_t) STRATA_TIME_NOW - 1 - STRATA_TIME_BIAS;
  const int64_t min_us = 1 - STRATA_TIME_BIAS;
  int64_t sec = (int64_t) ts->tv_sec;
  int64_t us;
  if (sec > max_us / 1000000) us = max_us;
  else if (sec < min_us / 1000000) us = min_us;
  else us = sec * 1000000 + ts->tv_nsec / 1000;
  if (us > max_us) us = max_us;
  if (us < min_us) us = min_us;
  return (uint64_t) (us + STRATA_TIME_BIAS);
}

static void populate_stat (uint32_t *ints, struct stat* stat) {
  stat->st_mode = *ints++;
  stat->st_uid = *ints++;
  stat->st_gid = *ints++;
  stat->st_size = uint32s_to_uint64(&ints);
  // Strata: the slot fuse-native calls dev carries st_ino's high half (change 7 at the top; the
  // kernel sets a FUSE file's st_dev itself)
  uint64_t ino_high = *ints++;
  stat->st_dev = 0;
  stat->st_nlink = *ints++;
  stat->st_ino = (ino_high << 32) | *ints++;
  stat->st_rdev = *ints++;
  stat->st_blksize = *ints++;
  stat->st_blocks = uint32s_to_uint64(&ints);
#ifdef __APPLE__
  uint32s_to_timespec(&stat->st_atimespec, &ints);
  uint32s_to_timespec(&stat->st_mtimespec, &ints);
  uint32s_to_timespec(&stat->st_ctimespec, &ints);
#else
  uint32s_to_timespec(&stat->st_atim, &ints);
  uint32s_to_timespec(&stat->st_mtim, &ints);
  uint32s_to_timespec(&stat->st_ctim, &ints);
#endif
}

static void populate_statvfs (uint32_t *ints, struct statvfs* statvfs) {
  statvfs->f_bsize = *ints++;
  statvfs->f_frsize = *ints++;
  statvfs->f_blocks = *ints++;
  statvfs->f_bfree = *ints++;
  statvfs->f_bavail = *ints++;
  statvfs->f_files = *ints++;
  statvfs->f_ffree = *ints++;
  statvfs->f_favail = *ints++;
  statvfs->f_fsid = *ints++;
  statvfs->f_flag = *ints++;
  statvfs->f_namemax = *ints++;
}

// Methods

FUSE_METHOD(statfs, 1, 1, (const char * path, struct statvfs *statvfs), {
  l->path = path;
  l->statvfs = statvfs;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
}, {
  NAPI_ARGV_BUFFER_CAST(uint32_t*, ints, 2)
  populate_statvfs(ints, l->statvfs);
})

// Strata: the kernel opcode of the request this libfuse thread is serving (change 8 at the top;
// libfuse 2.9's workers receive a request and process it on the same thread)
static __thread uint32_t strata_opcode = 0;

// Strata: whether a getattr answers for a node the kernel holds (GETATTR, SETATTR's reply, the
// attributes of an open, ...) rather than for a name it looks up (LOOKUP, and the new name of
// MKDIR, MKNOD, SYMLINK, LINK, CREATE)
static int strata_getattr_of_node (void) {
  switch (strata_opcode) {
    case FUSE_LOOKUP: case FUSE_MKDIR: case FUSE_MKNOD: case FUSE_SYMLINK: case FUSE_LINK: case FUSE_CREATE: case 0:
      return 0;
    default:
      return 1;
  }
}

// Strata: a string after the stat array in getattr's answer: the name to move the LOOKUP's node to
// (change 9 at the top)
static void strata_take_detach (napi_env env, napi_value v, fuse_thread_locals_t *l) {
  napi_valuetype t;
  size_t len = 0;
  if (l->lookup_name == NULL) return;
  if (napi_typeof(env, v, &t) != napi_ok || t != napi_string) return;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) return;
  char *s = (char *) malloc(len + 1);
  char *name = strdup(l->lookup_name);
  char *as = NULL;
  if (s != NULL) {
    napi_get_value_string_utf8(env, v, s, len + 1, &len);
    as = strdup(s);
  }
  if (s == NULL || name == NULL || as == NULL) {
    free(s);
    free(name);
    free(as);
    return;
  }
  fuse_thread_t *ft = l->fuse;
  pthread_mutex_lock(&ft->detach_mut);
  for (int i = 0; i < 16; i++) {
    if (ft->detaching[i].name == NULL) {
      ft->detaching[i].parent = l->lookup_parent;
      ft->detaching[i].name = name;
      ft->detaching[i].as = as;
      name = NULL;
      break;
    }
  }
  pthread_mutex_unlock(&ft->detach_mut);
  if (name != NULL) {  // sixteen moves at once: this one is not made (the old behaviour)
    free(name);
    free(as);
    free(s);
    return;
  }
  l->detach = s;
}

// Strata: whether a node of (parent, name) is being moved; with leave, it no longer is
static int strata_detaching_name (fuse_thread_t *ft, uint64_t parent, const char *name, int leave) {
  int found = 0;
  pthread_mutex_lock(&ft->detach_mut);
  for (int i = 0; i < 16 && !found; i++) {
    if (ft->detaching[i].name != NULL && ft->detaching[i].parent == parent && strcmp(ft->detaching[i].name, name) == 0) {
      found = 1;
      if (leave) {
        free(ft->detaching[i].name);
        free(ft->detaching[i].as);
        ft->detaching[i].name = NULL;
        ft->detaching[i].as = NULL;
      }
    }
  }
  pthread_mutex_unlock(&ft->detach_mut);
  return found;
}

FUSE_METHOD(getattr, 2, 2, (const char *path, struct stat *stat), {
  l->path = path;
  l->stat = stat;
  l->flags = strata_getattr_of_node();
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_get_boolean(env, l->flags != 0, &(argv[3]));
}, {
  NAPI_ARGV_BUFFER_CAST(uint32_t*, ints, 2)
  populate_stat(ints, l->stat);
  strata_take_detach(env, argv[3], l);
})

// Strata: the LOOKUP this libfuse thread is serving (change 9 at the top): its unique, parent node
// and name (in the thread's receive buffer, which stays put until the reply is sent), and the name
// its node is to move to before the reply goes out
static __thread uint64_t strata_req_unique = 0;
static __thread uint64_t strata_lookup_parent = 0;
static __thread const char *strata_lookup_name = NULL;
static __thread char *strata_detach_as = NULL;
static __thread fuse_thread_t *strata_detach_ft = NULL;
// set while libfuse runs the RENAME that moves a node: strata_rename answers it without JavaScript
static __thread int strata_detaching = 0;

static int strata_getattr (const char *path, struct stat *stat) {
  fuse_thread_locals_t *l = get_thread_locals();
  int lookup = strata_opcode == FUSE_LOOKUP && strata_lookup_name != NULL;
  l->detach = NULL;
  l->lookup_parent = strata_lookup_parent;
  l->lookup_name = lookup ? strata_lookup_name : NULL;
  int res = fuse_native_getattr(path, stat);
  l->lookup_name = NULL;
  if (l->detach != NULL) {
    // entered in ft->detaching by strata_take_detach; strata_chan_send moves the node and leaves
    strata_detach_as = l->detach;
    strata_detach_ft = l->fuse;
    l->detach = NULL;
  } else if (lookup && res == 0 && strata_detaching_name(l->fuse, strata_lookup_parent, strata_lookup_name, 0)) {
    // answered after the LOOKUP that moves this name's node, which libfuse may not have moved yet:
    // ESTALE, and the kernel asks again
    res = -ESTALE;
  }
  return res;
}

FUSE_METHOD(fgetattr, 2, 1, (const char *path, struct stat *stat, struct fuse_file_info *info), {
  l->path = path;
  l->stat = stat;
  l->info = info;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  if (l->info != NULL) {
    napi_create_uint32(env, l->info->fh, &(argv[3]));
  } else {
    napi_create_uint32(env, 0, &(argv[3]));
  }
}, {
  NAPI_ARGV_BUFFER_CAST(uint32_t*, ints, 2)
  populate_stat(ints, l->stat);
})

FUSE_METHOD_VOID(access, 2, 0, (const char *path, int mode), {
  l->path = path;
  l->mode = mode;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_uint32(env, l->mode, &(argv[3]));
})

FUSE_METHOD(open, 2, 1, (const char *path, struct fuse_file_info *info), {
  l->path = path;
  l->info = info;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  if (l->info != NULL) {
    napi_create_uint32(env, l->info->flags, &(argv[3]));
  } else {
    napi_create_uint32(env, 0, &(argv[3]));
  }
}, {
  NAPI_ARGV_INT32(fd, 2)
  if (fd != 0) {
    l->info->fh = fd;
  }
})

FUSE_METHOD(opendir, 3, 1, (const char *path, struct fuse_file_info *info), {
  l->path = path;
  l->info = info;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  if (l->info != NULL) {
    napi_create_uint32(env, l->info->fh, &(argv[3]));
    napi_create_uint32(env, l->info->flags, &(argv[4]));
  } else {
    napi_create_uint32(env, 0, &(argv[3]));
    napi_create_uint32(env, 0, &(argv[4]));
  }
}, {
  NAPI_ARGV_INT32(fd, 2)
  if (fd != 0) {
    l->info->fh = fd;
  }
})

FUSE_METHOD(create, 2, 1, (const char *path, mode_t mode, struct fuse_file_info *info), {
  l->path = path;
  l->mode = mode;
  l->info = info;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_uint32(env, l->mode, &(argv[3]));
}, {
  NAPI_ARGV_INT32(fd, 2)
  if (fd != 0) {
    l->info->fh = fd;
  }
})

FUSE_METHOD_VOID(utimens, 5, 0, (const char *path, const struct timespec tv[2]), {
  l->path = path;
  l->atime = utime_to_uint64(&tv[0]);
  l->mtime = utime_to_uint64(&tv[1]);
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  FUSE_UINT64_TO_INTS_ARGV(l->atime, 3)
  // Strata: the mtime (change 3 at the top; fuse-native passed the atime twice)
  FUSE_UINT64_TO_INTS_ARGV(l->mtime, 5)
})

FUSE_METHOD_VOID(release, 2, 0, (const char *path, struct fuse_file_info *info), {
  l->path = path;
  l->info = info;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  if (l->info != NULL) {
    napi_create_uint32(env, l->info->fh, &(argv[3]));
  } else {
    napi_create_uint32(env, 0, &(argv[3]));
  }
})

FUSE_METHOD_VOID(releasedir, 2, 0, (const char *path, struct fuse_file_info *info), {
  l->path = path;
  l->info = info;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  if (l->info != NULL) {
    napi_create_uint32(env, l->info->fh, &(argv[3]));
  } else {
    napi_create_uint32(env, 0, &(argv[3]));
  }
})

FUSE_METHOD(read, 6, 2, (const char *path, char *buf, size_t len, off_t offset, struct fuse_file_info *info), {
  l->path = path;
  l->buf = buf;
  l->len = len;
  l->offset = offset;
  l->info = info;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_uint32(env, l->info->fh, &(argv[3]));
  napi_create_external_buffer(env, l->len, (char *) l->buf, NULL, NULL, &(argv[4]));
  napi_create_uint32(env, l->len, &(argv[5]));
  FUSE_UINT64_TO_INTS_ARGV(l->offset, 6)
}, {
  if (IS_ARRAY_BUFFER_DETACH_SUPPORTED == 1) assert(napi_detach_arraybuffer(env, argv[3]) == napi_ok);
})

FUSE_METHOD(write, 6, 2, (const char *path, const char *buf, size_t len, off_t offset, struct fuse_file_info *info), {
  l->path = path;
  l->buf = buf;
  l->len = len;
  l->offset = offset;
  l->info = info;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_uint32(env, l->info->fh, &(argv[3]));
  napi_create_external_buffer(env, l->len, (char *) l->buf, NULL, NULL, &(argv[4]));
  napi_create_uint32(env, l->len, &(argv[5]));
  FUSE_UINT64_TO_INTS_ARGV(l->offset, 6)
}, {
  if (IS_ARRAY_BUFFER_DETACH_SUPPORTED == 1) assert(napi_detach_arraybuffer(env, argv[3]) == napi_ok);
})

FUSE_METHOD(readdir, 2, 2, (const char *path, void *buf, fuse_fill_dir_t filler, off_t offset, struct fuse_file_info *info), {
  l->buf = buf;
  l->path = path;
  l->offset = offset;
  l->info = info;
  l->readdir_filler = filler;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  // Strata: the handle opendir returned (change 8 at the top)
  napi_create_uint32(env, l->info != NULL ? (uint32_t) l->info->fh : 0, &(argv[3]));
}, {
  uint32_t stats_length;
  uint32_t names_length;
  napi_get_array_length(env, argv[3], &stats_length);
  napi_get_array_length(env, argv[2], &names_length);

  napi_value raw_names = argv[2];
  napi_value raw_stats = argv[3];

  if (names_length != stats_length) {
    NAPI_FOR_EACH(raw_names, raw_name) {
      NAPI_UTF8(name, 1024, raw_name)
      int err = l->readdir_filler((char *) l->buf, name, NULL, 0);
      if (err == 1) {
        break;
      }
    }
  } else {
    NAPI_FOR_EACH(raw_names, raw_name) {
      NAPI_UTF8(name, 1024, raw_name)
      napi_value raw_stat;
      napi_get_element(env, raw_stats, i, &raw_stat);

      NAPI_BUFFER_CAST(uint32_t*, stats_array, raw_stat);
      struct stat st;
      populate_stat(stats_array, &st);

      // TODO: It turns out readdirplus likely won't work with FUSE 29...
      // Metadata caching between readdir/getattr will be enabled when we upgrade fuse-shared-library
      int err = l->readdir_filler((char *) l->buf, name, (struct stat *) &st, 0);
      if (err == 1) {
        break;
      }
    }
  }
})

#ifdef __APPLE__

FUSE_METHOD(setxattr, 5, 1, (const char *path, const char *name, const char *value, size_t size, int flags, uint32_t position), {
  l->path = path;
  l->name = name;
  l->value = value;
  l->size = size;
  l->flags = flags;
  l->position = position;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_string_utf8(env, l->name, NAPI_AUTO_LENGTH, &(argv[3]));
  napi_create_external_buffer(env, l->size, (char *) l->value, NULL, NULL, &(argv[4]));
  napi_create_uint32(env, l->position, &(argv[5]));
  napi_create_uint32(env, l->flags, &(argv[6]));
}, {
  if (IS_ARRAY_BUFFER_DETACH_SUPPORTED == 1) assert(napi_detach_arraybuffer(env, argv[2]) == napi_ok);
})

FUSE_METHOD(getxattr, 4, 1, (const char *path, const char *name, char *value, size_t size, uint32_t position), {
  l->path = path;
  l->name = name;
  l->value = value;
  l->size = size;
  l->position = position;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_string_utf8(env, l->name, NAPI_AUTO_LENGTH, &(argv[3]));
  napi_create_external_buffer(env, l->size, (char *) l->value, NULL, NULL, &(argv[4]));
  napi_create_uint32(env, l->position, &(argv[5]));
}, {
  if (IS_ARRAY_BUFFER_DETACH_SUPPORTED == 1) assert(napi_detach_arraybuffer(env, argv[2]) == napi_ok);
})

#else

FUSE_METHOD(setxattr, 5, 1, (const char *path, const char *name, const char *value, size_t size, int flags), {
  l->path = path;
  l->name = name;
  l->value = value;
  l->size = size;
  l->flags = flags;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_string_utf8(env, l->name, NAPI_AUTO_LENGTH, &(argv[3]));
  napi_create_external_buffer(env, l->size, (char *) l->value, NULL, NULL, &(argv[4]));
  napi_create_uint32(env, 0, &(argv[5])); // normalize apis between mac and linux
  napi_create_uint32(env, l->flags, &(argv[6]));
}, {
  if (IS_ARRAY_BUFFER_DETACH_SUPPORTED == 1) assert(napi_detach_arraybuffer(env, argv[2]) == napi_ok);
})

FUSE_METHOD(getxattr, 4, 1, (const char *path, const char *name, char *value, size_t size), {
  l->path = path;
  l->name = name;
  l->value = value;
  l->size = size;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_string_utf8(env, l->name, NAPI_AUTO_LENGTH, &(argv[3]));
  napi_create_external_buffer(env, l->size, (char *) l->value, NULL, NULL, &(argv[4]));
  napi_create_uint32(env, 0, &(argv[5]));
}, {
  if (IS_ARRAY_BUFFER_DETACH_SUPPORTED == 1) assert(napi_detach_arraybuffer(env, argv[2]) == napi_ok);
})

#endif

FUSE_METHOD(listxattr, 2, 1, (const char *path, char *list, size_t size), {
  l->path = path;
  l->list = list;
  l->size = size;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_external_buffer(env, l->size, l->list, NULL, NULL, &(argv[3]));
}, {
  if (IS_ARRAY_BUFFER_DETACH_SUPPORTED == 1) assert(napi_detach_arraybuffer(env, argv[2]) == napi_ok);
})

FUSE_METHOD_VOID(removexattr, 2, 0, (const char *path, const char *name), {
  l->path = path;
  l->name = name;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_string_utf8(env, l->name, NAPI_AUTO_LENGTH, &(argv[3]));
})

FUSE_METHOD_VOID(flush, 2, 0, (const char *path, struct fuse_file_info *info), {
  l->path = path;
  l->info = info;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  if (l->info != NULL) {
    napi_create_uint32(env, l->info->fh, &(argv[3]));
  } else {
    napi_create_uint32(env, 0, &(argv[3]));
  }
})

FUSE_METHOD_VOID(fsync, 3, 0, (const char *path, int datasync, struct fuse_file_info *info), {
  l->path = path;
  l->mode = datasync;
  l->info = info;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_uint32(env, l->mode, &(argv[3]));
  if (l->info != NULL) {
    napi_create_uint32(env, l->info->fh, &(argv[4]));
  } else {
    napi_create_uint32(env, 0, &(argv[4]));
  }
})

FUSE_METHOD_VOID(fsyncdir, 3, 0, (const char *path, int datasync, struct fuse_file_info *info), {
  l->path = path;
  l->mode = datasync;
  l->info = info;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_uint32(env, l->mode, &(argv[3]));
  if (l->info != NULL) {
    napi_create_uint32(env, l->info->fh, &(argv[4]));
  } else {
    napi_create_uint32(env, 0, &(argv[4]));
  }
})


FUSE_METHOD_VOID(truncate, 3, 0, (const char *path, off_t size), {
  l->path = path;
  l->offset = size;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  FUSE_UINT64_TO_INTS_ARGV(l->offset, 3)
})

FUSE_METHOD_VOID(ftruncate, 4, 0, (const char *path, off_t size, struct fuse_file_info *info), {
  l->path = path;
  l->offset = size;
  l->info = info;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  if (l->info != NULL) {
    napi_create_uint32(env, l->info->fh, &(argv[3]));
  } else {
    napi_create_uint32(env, 0, &(argv[3]));
  }
  FUSE_UINT64_TO_INTS_ARGV(l->offset, 4)
})

FUSE_METHOD(readlink, 1, 1, (const char *path, char *linkname, size_t len), {
  l->path = path;
  l->linkname = linkname;
  l->len = len;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
}, {
  NAPI_ARGV_UTF8(linkname, l->len, 2)
  strncpy(l->linkname, linkname, l->len);
})

FUSE_METHOD_VOID(chown, 3, 0, (const char *path, uid_t uid, gid_t gid), {
  l->path = path;
  l->uid = uid;
  l->gid = gid;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_uint32(env, l->uid, &(argv[3]));
  napi_create_uint32(env, l->gid, &(argv[4]));
})

FUSE_METHOD_VOID(chmod, 2, 0, (const char *path, mode_t mode), {
  l->path = path;
  l->mode = mode;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_uint32(env, l->mode, &(argv[3]));
})

FUSE_METHOD_VOID(mknod, 3, 0, (const char *path, mode_t mode, dev_t dev), {
  l->path = path;
  l->mode = mode;
  l->dev = dev;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_uint32(env, l->mode, &(argv[3]));
  napi_create_uint32(env, l->dev, &(argv[4]));
})

FUSE_METHOD_VOID(unlink, 1, 0, (const char *path), {
  l->path = path;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
})

FUSE_METHOD_VOID(rename, 2, 0, (const char *path, const char *dest), {
  l->path = path;
  l->dest = dest;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_string_utf8(env, l->dest, NAPI_AUTO_LENGTH, &(argv[3]));
})

// Strata: a node moved in libfuse's table only (change 9 at the top) renames nothing in the filesystem
static int strata_rename (const char *path, const char *dest) {
  if (strata_detaching) return 0;
  return fuse_native_rename(path, dest);
}

FUSE_METHOD_VOID(link, 2, 0, (const char *path, const char *dest), {
  l->path = path;
  l->dest = dest;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_string_utf8(env, l->dest, NAPI_AUTO_LENGTH, &(argv[3]));
})

FUSE_METHOD_VOID(symlink, 2, 0, (const char *path, const char *dest), {
  l->path = path;
  l->dest = dest;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_string_utf8(env, l->dest, NAPI_AUTO_LENGTH, &(argv[3]));
})

FUSE_METHOD_VOID(mkdir, 2, 0, (const char *path, mode_t mode), {
  l->path = path;
  l->mode = mode;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
  napi_create_uint32(env, l->mode, &(argv[3]));
})

FUSE_METHOD_VOID(rmdir, 1, 0, (const char *path), {
  l->path = path;
}, {
  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));
})

static void fuse_native_dispatch_init (uv_async_t* handle, fuse_thread_locals_t* l, fuse_thread_t* ft) {\
  FUSE_NATIVE_CALLBACK(ft->handlers[op_init], {
    napi_value argv[2];

    napi_get_reference_value(env, l->self, &(argv[0]));
    napi_create_uint32(env, l->op, &(argv[1]));

    NAPI_MAKE_CALLBACK(env, NULL, ctx, callback, 2, argv, NULL);
  })
}

NAPI_METHOD(fuse_native_signal_init) {
  NAPI_ARGV(2)
  NAPI_ARGV_BUFFER_CAST(fuse_thread_locals_t *, l, 0);
  NAPI_ARGV_INT32(res, 1);
  l->res = res;
  uv_sem_post(&(l->sem));
  return NULL;
}

static void * fuse_native_init (struct fuse_conn_info *conn) {
  fuse_thread_locals_t *l = get_thread_locals();

  l->op = op_init;
  l->op_fn = fuse_native_dispatch_init;

  uv_async_send(&(l->async));
  uv_sem_wait(&(l->sem));

  return l->fuse;
}


// Strata: read-ahead chunks served by libfuse threads (change 2 at the top)

static uint64_t strata_mono_ns (void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

// Bytes served into buf from a registered chunk that wholly covers the
// request, or -1 (the request goes to JavaScript).
static int strata_ra_serve (fuse_thread_t *ft, char *buf, size_t len, off_t offset, uint64_t fh) {
  if (len == 0 || offset < 0 || __atomic_load_n(&(ft->ra_live), __ATOMIC_ACQUIRE) == 0) return -1;
  int n = -1;
  int notify = 0;
  uint64_t off = (uint64_t) offset;
  pthread_rwlock_rdlock(&(ft->ra_lock));
  if (ft->ra_on) {
    for (int i = 0; i < STRATA_RA_SLOTS; i++) {
      strata_ra_slot_t *s = &(ft->ra[i]);
      if (s->data == NULL || s->fh != fh || off < s->start || off + len > s->start + s->len) continue;
      if (strata_mono_ns() >= s->expires_ns) break;
      memcpy(buf, s->data + (off - s->start), len);
      uint64_t before = __atomic_fetch_add(&(s->served), (uint64_t) len, __ATOMIC_RELAXED);
      uint64_t need = __atomic_load_n(&(s->need), __ATOMIC_RELAXED);
      notify = before == 0 || (before < need && before + len >= need);
      n = (int) len;
      break;
    }
    if (n >= 0) {
      __atomic_fetch_add(&(ft->ra_hits), 1, __ATOMIC_RELAXED);
      __atomic_fetch_add(&(ft->ra_bytes), (uint64_t) len, __ATOMIC_RELAXED);
      // under the lock: strata_ra_stop closes the handle only after clearing ra_on
      if (notify) uv_async_send(&(ft->ra_async));
    }
  }
  pthread_rwlock_unlock(&(ft->ra_lock));
  return n;
}

static void strata_ra_notify (uv_async_t *handle) {
  fuse_thread_t *ft = (fuse_thread_t *) handle->data;
  napi_env env = ft->env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value cb;
  napi_value global;
  napi_get_reference_value(env, ft->ra_cb, &cb);
  napi_get_global(env, &global);
  if (cb != NULL) NAPI_MAKE_CALLBACK(env, NULL, global, cb, 0, NULL, NULL)
  napi_close_handle_scope(env, scope);
}

// strata_ra_listen(ft, callback) → number of slots. Turns the table on; the
// callback runs (coalesced) after a chunk served its first or last bytes.
NAPI_METHOD(strata_ra_listen) {
  NAPI_ARGV(2)
  NAPI_ARGV_BUFFER_CAST(fuse_thread_t *, ft, 0);
  if (ft->ra_on) {
    NAPI_RETURN_UINT32(STRATA_RA_SLOTS)
  }
  napi_create_reference(env, argv[1], 1, &(ft->ra_cb));
  int err = uv_async_init(uv_default_loop(), &(ft->ra_async), (uv_async_cb) strata_ra_notify);
  if (err < 0) {
    napi_throw_error(env, NULL, "uv_async_init failed");
    return NULL;
  }
  ft->ra_async.data = ft;
  uv_unref((uv_handle_t *) &(ft->ra_async));
  pthread_rwlock_wrlock(&(ft->ra_lock));
  ft->ra_on = 1;
  pthread_rwlock_unlock(&(ft->ra_lock));
  NAPI_RETURN_UINT32(STRATA_RA_SLOTS)
}

// strata_ra_stop(ft): every slot let go, nothing served natively any more.
NAPI_METHOD(strata_ra_stop) {
  NAPI_ARGV(1)
  NAPI_ARGV_BUFFER_CAST(fuse_thread_t *, ft, 0);
  pthread_rwlock_wrlock(&(ft->ra_lock));
  int was = ft->ra_on;
  ft->ra_on = 0;
  for (int i = 0; i < STRATA_RA_SLOTS; i++) ft->ra[i].data = NULL;
  __atomic_store_n(&(ft->ra_live), 0, __ATOMIC_RELEASE);
  pthread_rwlock_unlock(&(ft->ra_lock));
  if (was) {
    uv_close((uv_handle_t *) &(ft->ra_async), NULL);
    napi_delete_reference(env, ft->ra_cb);
    ft->ra_cb = NULL;
  }
  return NULL;
}

// strata_ra_put(ft, slot, fh, start, buffer, ttlMs, need) → true when
// registered; `need` is how many bytes served here complete the chunk (what
// JavaScript has not served of it). The caller keeps the buffer alive and
// unchanged until strata_ra_take.
NAPI_METHOD(strata_ra_put) {
  NAPI_ARGV(7)
  NAPI_ARGV_BUFFER_CAST(fuse_thread_t *, ft, 0);
  NAPI_ARGV_UINT32(slot, 1);
  NAPI_ARGV_UINT32(fh, 2);
  double start = 0;
  double ttl = 0;
  napi_get_value_double(env, argv[3], &start);
  napi_get_value_double(env, argv[5], &ttl);
  double need = 0;
  napi_get_value_double(env, argv[6], &need);
  char *data = NULL;
  size_t len = 0;
  napi_get_buffer_info(env, argv[4], (void **) &data, &len);
  bool ok = false;
  if (slot < STRATA_RA_SLOTS && start >= 0 && ttl > 0 && data != NULL && len > 0) {
    pthread_rwlock_wrlock(&(ft->ra_lock));
    if (ft->ra_on) {
      strata_ra_slot_t *s = &(ft->ra[slot]);
      if (s->data == NULL) __atomic_fetch_add(&(ft->ra_live), 1, __ATOMIC_RELEASE);
      s->data = data;
      s->fh = fh;
      s->start = (uint64_t) start;
      s->len = len;
      s->served = 0;
      s->need = need > 0 ? (uint64_t) need : 0;
      s->expires_ns = strata_mono_ns() + (uint64_t) (ttl * 1e6);
      ok = true;
    }
    pthread_rwlock_unlock(&(ft->ra_lock));
  }
  napi_value r;
  napi_get_boolean(env, ok, &r);
  return r;
}

// strata_ra_take(ft, slot) → bytes the slot served; once this returns, no
// libfuse thread reads the slot's buffer.
NAPI_METHOD(strata_ra_take) {
  NAPI_ARGV(2)
  NAPI_ARGV_BUFFER_CAST(fuse_thread_t *, ft, 0);
  NAPI_ARGV_UINT32(slot, 1);
  uint64_t served = 0;
  if (slot < STRATA_RA_SLOTS) {
    pthread_rwlock_wrlock(&(ft->ra_lock));
    strata_ra_slot_t *s = &(ft->ra[slot]);
    if (s->data != NULL) {
      served = s->served;
      s->data = NULL;
      __atomic_fetch_sub(&(ft->ra_live), 1, __ATOMIC_RELEASE);
    }
    pthread_rwlock_unlock(&(ft->ra_lock));
  }
  napi_value r;
  napi_create_double(env, (double) served, &r);
  return r;
}

// strata_ra_need(ft, slot, need): JavaScript served more of the chunk; the
// completion notice comes when this many bytes were served here.
NAPI_METHOD(strata_ra_need) {
  NAPI_ARGV(3)
  NAPI_ARGV_BUFFER_CAST(fuse_thread_t *, ft, 0);
  NAPI_ARGV_UINT32(slot, 1);
  double need = 0;
  napi_get_value_double(env, argv[2], &need);
  if (slot < STRATA_RA_SLOTS) __atomic_store_n(&(ft->ra[slot].need), need > 0 ? (uint64_t) need : 0, __ATOMIC_RELAXED);
  return NULL;
}

// strata_ra_served(ft, slot) → bytes served so far (0 for a free slot).
NAPI_METHOD(strata_ra_served) {
  NAPI_ARGV(2)
  NAPI_ARGV_BUFFER_CAST(fuse_thread_t *, ft, 0);
  NAPI_ARGV_UINT32(slot, 1);
  uint64_t served = slot < STRATA_RA_SLOTS ? __atomic_load_n(&(ft->ra[slot].served), __ATOMIC_RELAXED) : 0;
  napi_value r;
  napi_create_double(env, (double) served, &r);
  return r;
}

// strata_ra_stats(ft) → [READs served natively, bytes].
// Strata: whether libfuse has yet to move a node to the name `as` (change 9 at the top): until then
// the kernel may still ask about that node by its old name
NAPI_METHOD(strata_detach_pending) {
  NAPI_ARGV(2)
  NAPI_ARGV_BUFFER_CAST(fuse_thread_t *, ft, 0);
  size_t len = 0;
  napi_get_value_string_utf8(env, argv[1], NULL, 0, &len);
  char *as = (char *) malloc(len + 1);
  int found = 0;
  if (as != NULL) {
    napi_get_value_string_utf8(env, argv[1], as, len + 1, &len);
    pthread_mutex_lock(&ft->detach_mut);
    for (int i = 0; i < 16 && !found; i++) found = ft->detaching[i].as != NULL && strcmp(ft->detaching[i].as, as) == 0;
    pthread_mutex_unlock(&ft->detach_mut);
    free(as);
  }
  napi_value res;
  napi_get_boolean(env, found, &res);
  return res;
}

NAPI_METHOD(strata_ra_stats) {
  NAPI_ARGV(1)
  NAPI_ARGV_BUFFER_CAST(fuse_thread_t *, ft, 0);
  napi_value arr;
  napi_value v;
  napi_create_array_with_length(env, 2, &arr);
  napi_create_double(env, (double) __atomic_load_n(&(ft->ra_hits), __ATOMIC_RELAXED), &v);
  napi_set_element(env, arr, 0, v);
  napi_create_double(env, (double) __atomic_load_n(&(ft->ra_bytes), __ATOMIC_RELAXED), &v);
  napi_set_element(env, arr, 1, v);
  return arr;
}

static int strata_read (const char *path, char *buf, size_t len, off_t offset, struct fuse_file_info *info) {
  fuse_thread_t *ft = (fuse_thread_t *) fuse_get_context()->private_data;
  if (ft != NULL && info != NULL) {
    int n = strata_ra_serve(ft, buf, len, offset, info->fh);
    if (n >= 0) return n;
  }
  return fuse_native_read(path, buf, len, offset, info);
}

// Top-level dispatcher

static void fuse_native_dispatch (uv_async_t* handle) {
  fuse_thread_locals_t *l = (fuse_thread_locals_t *) handle->data;
  fuse_thread_t *ft = l->fuse;
  void (*fn)(uv_async_t *, fuse_thread_locals_t *, fuse_thread_t *) = l->op_fn;

  fn(handle, l, ft);
}

static void fuse_native_async_init (uv_async_t* handle) {
  fuse_thread_t *ft = (fuse_thread_t *) handle->data;
  fuse_thread_locals_t *l;

  FUSE_NATIVE_CALLBACK(ft->malloc, {
    napi_value argv[1];
    napi_create_uint32(ft->env, (uint32_t) sizeof(fuse_thread_locals_t), &(argv[0]));

    napi_value buf;
    NAPI_MAKE_CALLBACK(ft->env, NULL, ctx, callback, 1, argv, &buf);

    size_t l_len;

    napi_get_buffer_info(env, buf, (void **) &l, &l_len);
    napi_create_reference(env, buf, 1, &(l->self));
  })


  int err = uv_async_init(uv_default_loop(), &(l->async), (uv_async_cb) fuse_native_dispatch);
  assert(err >= 0);

  uv_unref((uv_handle_t *) &(l->async));

  uv_sem_init(&(l->sem), 0);
  l->async.data = l;
  ft->async.data = l;
  l->fuse = ft;

  uv_sem_post(&(ft->sem));
}

static fuse_thread_locals_t* get_thread_locals () {
  struct fuse_context *ctx = fuse_get_context();
  fuse_thread_t *ft = (fuse_thread_t *) ctx->private_data;

  void *data = pthread_getspecific(thread_locals_key);

  if (data != NULL) {
    return (fuse_thread_locals_t *) data;
  }

  // Strata: a block an ended thread left behind, with its async handle and semaphore ready
  uv_mutex_lock(&(ft->free_mut));
  fuse_thread_locals_t *reused = (fuse_thread_locals_t *) ft->free_locals;
  if (reused != NULL) ft->free_locals = reused->next_free;
  uv_mutex_unlock(&(ft->free_mut));
  if (reused != NULL) {
    reused->next_free = NULL;
    pthread_setspecific(thread_locals_key, (void *) reused);
    return reused;
  }

  // Need to lock the mutation of l->async.
  uv_mutex_lock(&(ft->mut));
  ft->async.data = ft;

  // Notify the main thread to uv_async_init l->async.
  uv_async_send(&(ft->async));
  uv_sem_wait(&(ft->sem));

  fuse_thread_locals_t *l = (fuse_thread_locals_t*) ft->async.data;

  pthread_setspecific(thread_locals_key, (void *) l);
  uv_mutex_unlock(&(ft->mut));

  return l;
}

// Strata: runs when a libfuse worker thread ends; its block goes to the mount's free list
static void release_thread_locals (void *data) {
  fuse_thread_locals_t *l = (fuse_thread_locals_t *) data;
  fuse_thread_t *ft = l->fuse;
  uv_mutex_lock(&(ft->free_mut));
  l->next_free = ft->free_locals;
  ft->free_locals = l;
  uv_mutex_unlock(&(ft->free_mut));
}

static void* start_fuse_thread (void *data) {
  fuse_thread_t *ft = (fuse_thread_t *) data;
  fuse_loop_mt(ft->fuse);

  // Strata: ft->ch is libfuse's kernel channel (it owns the descriptor: unmounted, closed and freed
  // here); the session's channel is Strata's, freed with the session by fuse_destroy
  fuse_unmount(ft->mnt, ft->ch);
  fuse_destroy(ft->fuse);

  return NULL;
}

// Strata: the mount's channel (change 5 at the top)
#define STRATA_FUSE_MAX_PAGES 256              // the kernel's own limit (fs.fuse.max_pages_limit): 1 MiB
#define STRATA_FUSE_MAX_PAGES_FLAG (1u << 22)  // FUSE_MAX_PAGES, protocol 7.28
#define STRATA_FUSE_INIT_OUT_SIZE 64           // struct fuse_init_out since 7.23
#define STRATA_FUSE_BUFSIZE (STRATA_FUSE_MAX_PAGES * 4096 + 0x1000)  // a 1 MiB WRITE and its headers

typedef struct {
  uint64_t init_unique;  // the kernel's INIT request while its reply is pending, when it offered FUSE_MAX_PAGES (atomic)
} strata_chan_t;

// libfuse 2.9's receive on the kernel channel, with the INIT request noted
static int strata_chan_receive (struct fuse_chan **chp, char *buf, size_t size) {
  struct fuse_chan *ch = *chp;
  struct fuse_session *se = fuse_chan_session(ch);
  strata_chan_t *sc = (strata_chan_t *) fuse_chan_data(ch);
  ssize_t res;
  int err;

  // Strata: a move left by a request whose reply never went out (its name is in buf, read over below)
  if (strata_detach_as != NULL) {
    if (strata_lookup_name != NULL) strata_detaching_name(strata_detach_ft, strata_lookup_parent, strata_lookup_name, 1);
    free(strata_detach_as);
    strata_detach_as = NULL;
  }

restart:
  res = read(fuse_chan_fd(ch), buf, size);
  err = errno;
  if (fuse_session_exited(se)) return 0;
  if (res == -1) {
    if (err == ENOENT) goto restart;  // the request was interrupted
    if (err == ENODEV) {              // unmounted
      fuse_session_exit(se);
      return 0;
    }
    if (err != EINTR && err != EAGAIN) perror("fuse: reading device");
    return -err;
  }
  if ((size_t) res < sizeof(struct fuse_in_header)) {
    fprintf(stderr, "short read on fuse device\n");
    return -EIO;
  }
  struct fuse_in_header *in = (struct fuse_in_header *) buf;
  strata_opcode = in->opcode;
  strata_req_unique = in->unique;
  strata_lookup_parent = 0;
  strata_lookup_name = NULL;
  if (in->opcode == FUSE_LOOKUP && (size_t) res > sizeof(struct fuse_in_header) && buf[res - 1] == '\0') {
    strata_lookup_parent = in->nodeid;
    strata_lookup_name = buf + sizeof(struct fuse_in_header);
  }
  if (in->opcode == FUSE_INIT && (size_t) res >= sizeof(struct fuse_in_header) + sizeof(struct fuse_init_in)) {
    struct fuse_init_in *arg = (struct fuse_init_in *) (buf + sizeof(struct fuse_in_header));
    if (arg->major == 7 && arg->minor >= 28 && (arg->flags & STRATA_FUSE_MAX_PAGES_FLAG)) {
      __atomic_store_n(&sc->init_unique, in->unique, __ATOMIC_RELEASE);
    }
  }
  return res;
}

static int strata_chan_write (struct fuse_chan *ch, const struct iovec iov[], size_t count) {
  if (iov == NULL) return 0;
  ssize_t res = writev(fuse_chan_fd(ch), iov, count);
  int err = errno;
  if (res == -1) {
    struct fuse_session *se = fuse_chan_session(ch);
    // ENOENT: the request was interrupted
    if (se != NULL && !fuse_session_exited(se) && err != ENOENT) perror("fuse: writing device");
    return -err;
  }
  return 0;
}

// Strata: the reply of a RENAME handed to libfuse by strata_detach (change 9 at the top): its error
static int strata_detach_reply (struct fuse_chan *ch, const struct iovec iov[], size_t count) {
  int *err = (int *) fuse_chan_data(ch);
  if (iov != NULL && count >= 1 && iov[0].iov_len >= sizeof(struct fuse_out_header)) {
    *err = ((const struct fuse_out_header *) iov[0].iov_base)->error;
  }
  return 0;
}

static struct fuse_chan_ops strata_detach_chan_ops = {
  .send = strata_detach_reply,
};

#define STRATA_DETACH_UNIQUE 0xfffffffffffffff0ull  // never one of the kernel's (they count up from 1)

// Strata: moves libfuse's node of (parent, name) to (root, as) by libfuse's own RENAME, as if the
// kernel had sent it (change 9 at the top). Runs on a libfuse thread that holds no path lock; waits,
// as any RENAME does, until no request is using the node.
static void strata_detach (struct fuse_session *se, uint64_t parent, const char *name, const char *as) {
  size_t nl = strlen(name) + 1;
  size_t al = strlen(as) + 1;
  size_t len = sizeof(struct fuse_in_header) + sizeof(struct fuse_rename_in) + nl + al;
  char *buf = (char *) calloc(1, len);
  if (buf == NULL) return;
  struct fuse_in_header *in = (struct fuse_in_header *) buf;
  in->len = len;
  in->opcode = FUSE_RENAME;
  in->unique = STRATA_DETACH_UNIQUE;
  in->nodeid = parent;
  struct fuse_rename_in *arg = (struct fuse_rename_in *) (buf + sizeof(struct fuse_in_header));
  arg->newdir = FUSE_ROOT_ID;
  memcpy(buf + sizeof(struct fuse_in_header) + sizeof(struct fuse_rename_in), name, nl);
  memcpy(buf + sizeof(struct fuse_in_header) + sizeof(struct fuse_rename_in) + nl, as, al);
  int err = 0;
  struct fuse_chan *ch = fuse_chan_new(&strata_detach_chan_ops, -1, len, &err);
  if (ch != NULL) {
    strata_detaching = 1;
    fuse_session_process(se, buf, len, ch);
    strata_detaching = 0;
    fuse_chan_destroy(ch);
    if (err != 0) fprintf(stderr, "strata: moving the node of a name another client replaced failed: %s\n", strerror(-err));
  }
  free(buf);
}

// libfuse 2.9's send, with the INIT reply widened to the 7.23 layout carrying FUSE_MAX_PAGES
static int strata_chan_send (struct fuse_chan *ch, const struct iovec iov[], size_t count) {
  strata_chan_t *sc = (strata_chan_t *) fuse_chan_data(ch);
  // Strata: a LOOKUP whose node is to move first (change 9 at the top)
  if (strata_detach_as != NULL && iov != NULL && count >= 1 && iov[0].iov_len >= sizeof(struct fuse_out_header) &&
      ((const struct fuse_out_header *) iov[0].iov_base)->unique == strata_req_unique) {
    char *as = strata_detach_as;
    strata_detach_as = NULL;
    struct fuse_session *se = fuse_chan_session(ch);
    if (se != NULL && strata_lookup_name != NULL) strata_detach(se, strata_lookup_parent, strata_lookup_name, as);
    if (strata_lookup_name != NULL) strata_detaching_name(strata_detach_ft, strata_lookup_parent, strata_lookup_name, 1);
    free(as);
  }
  uint64_t init = __atomic_load_n(&sc->init_unique, __ATOMIC_ACQUIRE);
  if (init != 0 && iov != NULL && count == 2 && iov[0].iov_len == sizeof(struct fuse_out_header)) {
    const struct fuse_out_header *oh = (const struct fuse_out_header *) iov[0].iov_base;
    if (oh->unique == init) {
      __atomic_store_n(&sc->init_unique, 0, __ATOMIC_RELEASE);
      if (oh->error == 0 && iov[1].iov_len >= sizeof(struct fuse_init_out) && iov[1].iov_len <= STRATA_FUSE_INIT_OUT_SIZE) {
        unsigned char out[STRATA_FUSE_INIT_OUT_SIZE];
        memset(out, 0, sizeof(out));
        memcpy(out, iov[1].iov_base, iov[1].iov_len);
        struct fuse_init_out *o = (struct fuse_init_out *) out;
        o->flags |= STRATA_FUSE_MAX_PAGES_FLAG;
        uint16_t max_pages = STRATA_FUSE_MAX_PAGES;
        memcpy(out + 28, &max_pages, sizeof(max_pages));  // fuse_init_out.max_pages (after time_gran)
        struct fuse_out_header h = *oh;
        h.len = sizeof(h) + sizeof(out);
        struct iovec wide[2] = { { &h, sizeof(h) }, { out, sizeof(out) } };
        return strata_chan_write(ch, wide, 2);
      }
    }
  }
  return strata_chan_write(ch, iov, count);
}

// the descriptor is the kernel channel's
static void strata_chan_destroy (struct fuse_chan *ch) {
  free(fuse_chan_data(ch));
}

static struct fuse_chan_ops strata_chan_ops = {
  .receive = strata_chan_receive,
  .send = strata_chan_send,
  .destroy = strata_chan_destroy,
};

static struct fuse_chan *strata_chan_new (struct fuse_chan *kern) {
  strata_chan_t *sc = (strata_chan_t *) calloc(1, sizeof(strata_chan_t));
  if (sc == NULL) return NULL;
  size_t bufsize = fuse_chan_bufsize(kern);
  if (bufsize < STRATA_FUSE_BUFSIZE) bufsize = STRATA_FUSE_BUFSIZE;
  struct fuse_chan *ch = fuse_chan_new(&strata_chan_ops, fuse_chan_fd(kern), bufsize, sc);
  if (ch == NULL) free(sc);
  return ch;
}

NAPI_METHOD(fuse_native_mount) {
  NAPI_ARGV(7)

  NAPI_ARGV_UTF8(mnt, 1024, 0);
  NAPI_ARGV_UTF8(mntopts, 1024, 1);
  NAPI_ARGV_BUFFER_CAST(fuse_thread_t *, ft, 2);
  napi_create_reference(env, argv[3], 1, &(ft->ctx));
  napi_create_reference(env, argv[4], 1, &(ft->malloc));
  napi_value handlers = argv[5];
  NAPI_ARGV_BUFFER_CAST(uint32_t *, implemented, 6)

  for (int i = 0; i < 35; i++) {
    ft->handlers[i] = NULL;
  }

  NAPI_FOR_EACH(handlers, handler) {
    napi_create_reference(env, handler, 1, &ft->handlers[i]);
  }

  ft->env = env;

  struct fuse_operations ops = { };
  if (implemented[op_access]) ops.access = fuse_native_access;
  if (implemented[op_truncate]) ops.truncate = fuse_native_truncate;
  if (implemented[op_ftruncate]) ops.ftruncate = fuse_native_ftruncate;
  if (implemented[op_getattr]) ops.getattr = strata_getattr; // Strata: change 9
  if (implemented[op_fgetattr]) ops.fgetattr = fuse_native_fgetattr;
  if (implemented[op_flush]) ops.flush = fuse_native_flush;
  if (implemented[op_fsync]) ops.fsync = fuse_native_fsync;
  if (implemented[op_fsyncdir]) ops.fsyncdir = fuse_native_fsyncdir;
  if (implemented[op_readdir]) ops.readdir = fuse_native_readdir;
  if (implemented[op_readlink]) ops.readlink = fuse_native_readlink;
  if (implemented[op_chown]) ops.chown = fuse_native_chown;
  if (implemented[op_chmod]) ops.chmod = fuse_native_chmod;
  if (implemented[op_mknod]) ops.mknod = fuse_native_mknod;
  if (implemented[op_setxattr]) ops.setxattr = fuse_native_setxattr;
  if (implemented[op_getxattr]) ops.getxattr = fuse_native_getxattr;
  if (implemented[op_listxattr]) ops.listxattr = fuse_native_listxattr;
  if (implemented[op_removexattr]) ops.removexattr = fuse_native_removexattr;
  if (implemented[op_statfs]) ops.statfs = fuse_native_statfs;
  if (implemented[op_open]) ops.open = fuse_native_open;
  if (implemented[op_opendir]) ops.opendir = fuse_native_opendir;
  if (implemented[op_read]) ops.read = strata_read; // Strata: chunks held by read-ahead first
  if (implemented[op_write]) ops.write = fuse_native_write;
  if (implemented[op_release]) ops.release = fuse_native_release;
  if (implemented[op_releasedir]) ops.releasedir = fuse_native_releasedir;
  if (implemented[op_create]) ops.create = fuse_native_create;
  if (implemented[op_utimens]) ops.utimens = fuse_native_utimens;
  // Strata: setting one time alone (touch -m, touch -a) reaches utimens, with UTIME_OMIT for the
  // other; without the flag libfuse 2 drops such a request
  ops.flag_utime_omit_ok = 1;
  if (implemented[op_unlink]) ops.unlink = fuse_native_unlink;
  if (implemented[op_rename]) ops.rename = strata_rename; // Strata: change 9
  if (implemented[op_link]) ops.link = fuse_native_link;
  if (implemented[op_symlink]) ops.symlink = fuse_native_symlink;
  if (implemented[op_mkdir]) ops.mkdir = fuse_native_mkdir;
  if (implemented[op_rmdir]) ops.rmdir = fuse_native_rmdir;
  if (implemented[op_init]) ops.init = fuse_native_init;

  int _argc = (strcmp(mntopts, "-o") <= 0) ? 1 : 2;
  char *_argv[] = {
    (char *) "fuse_bindings_dummy",
    (char *) mntopts
  };

  struct fuse_args args = FUSE_ARGS_INIT(_argc, _argv);
  struct fuse_chan *ch = fuse_mount(mnt, &args);

  if (ch == NULL) {
    napi_throw_error(env, "fuse failed", "fuse failed");
    return NULL;
  }

  // Strata: the session runs on Strata's channel over the same descriptor (change 5 at the top)
  struct fuse_chan *sch = strata_chan_new(ch);
  if (sch == NULL) {
    fuse_unmount(mnt, ch);
    napi_throw_error(env, "fuse failed", "fuse failed");
    return NULL;
  }
  struct fuse *fuse = fuse_new(sch, &args, &ops, sizeof(struct fuse_operations), ft);

  uv_mutex_init(&(ft->mut));
  uv_sem_init(&(ft->sem), 0);
  uv_mutex_init(&(ft->free_mut)); // Strata
  ft->free_locals = NULL;
  pthread_rwlock_init(&(ft->ra_lock), NULL); // Strata
  pthread_mutex_init(&(ft->detach_mut), NULL); // Strata: change 9
  memset(ft->detaching, 0, sizeof(ft->detaching));
  ft->ra_on = 0;
  ft->ra_live = 0;

  strncpy(ft->mnt, mnt, 1024);
  strncpy(ft->mntopts, mntopts, 1024);
  ft->fuse = fuse;
  ft->ch = ch;
  ft->mounted++;

  int err = uv_async_init(uv_default_loop(), &(ft->async), (uv_async_cb) fuse_native_async_init);

  if (fuse == NULL || err < 0) {
    if (fuse == NULL) fuse_unmount(mnt, ch);  // Strata: an option libfuse refused left a dead mount behind
    napi_throw_error(env, "fuse failed", "fuse failed");
    return NULL;
  }

  pthread_attr_init(&(ft->attr));
  pthread_create(&(ft->thread), &(ft->attr), start_fuse_thread, ft);

  return NULL;
}

NAPI_METHOD(fuse_native_unmount) {
  NAPI_ARGV(2)
  NAPI_ARGV_UTF8(mnt, 1024, 0);
  NAPI_ARGV_BUFFER_CAST(fuse_thread_t *, ft, 1);

  if (ft != NULL && ft->mounted) {
    // TODO: Investigate why the FUSE thread is not always killed after fusermount.
    // pthread_join(ft->thread, NULL);
  }

  // TODO: fix the async holding the loop
  uv_unref((uv_handle_t *) &(ft->async));
  ft->mounted--;

  return NULL;
}

NAPI_INIT() {
  const napi_node_version* version;
  assert(napi_get_node_version(env, &version) == napi_ok);

  if (version->major > 12 || (version->major == 12 && version->minor >= 16)) {
    IS_ARRAY_BUFFER_DETACH_SUPPORTED = 1;
  }

  pthread_key_create(&(thread_locals_key), release_thread_locals); // Strata: blocks of ended threads are reused

  NAPI_EXPORT_SIZEOF(fuse_thread_t)

  NAPI_EXPORT_FUNCTION(fuse_native_mount)
  NAPI_EXPORT_FUNCTION(strata_ra_listen)
  NAPI_EXPORT_FUNCTION(strata_ra_stop)
  NAPI_EXPORT_FUNCTION(strata_ra_put)
  NAPI_EXPORT_FUNCTION(strata_ra_take)
  NAPI_EXPORT_FUNCTION(strata_ra_served)
  NAPI_EXPORT_FUNCTION(strata_ra_need)
  NAPI_EXPORT_FUNCTION(strata_ra_stats)
  NAPI_EXPORT_FUNCTION(strata_detach_pending)
  NAPI_EXPORT_FUNCTION(fuse_native_unmount)

  NAPI_EXPORT_FUNCTION(fuse_native_signal_getattr)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_init)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_access)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_statfs)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_fgetattr)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_getattr)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_flush)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_fsync)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_fsyncdir)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_readdir)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_truncate)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_ftruncate)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_utimens)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_readlink)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_chown)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_chmod)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_mknod)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_setxattr)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_getxattr)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_listxattr)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_removexattr)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_open)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_opendir)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_read)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_write)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_release)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_releasedir)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_create)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_unlink)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_rename)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_link)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_symlink)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_mkdir)
  NAPI_EXPORT_FUNCTION(fuse_native_signal_rmdir)

  NAPI_EXPORT_UINT32(op_getattr)
  NAPI_EXPORT_UINT32(op_init)
  NAPI_EXPORT_UINT32(op_error)
  NAPI_EXPORT_UINT32(op_access)
  NAPI_EXPORT_UINT32(op_statfs)
  NAPI_EXPORT_UINT32(op_fgetattr)
  NAPI_EXPORT_UINT32(op_getattr)
  NAPI_EXPORT_UINT32(op_flush)
  NAPI_EXPORT_UINT32(op_fsync)
  NAPI_EXPORT_UINT32(op_fsyncdir)
  NAPI_EXPORT_UINT32(op_readdir)
  NAPI_EXPORT_UINT32(op_truncate)
  NAPI_EXPORT_UINT32(op_ftruncate)
  NAPI_EXPORT_UINT32(op_utimens)
  NAPI_EXPORT_UINT32(op_readlink)
  NAPI_EXPORT_UINT32(op_chown)
  NAPI_EXPORT_UINT32(op_chmod)
  NAPI_EXPORT_UINT32(op_mknod)
  NAPI_EXPORT_UINT32(op_setxattr)
  NAPI_EXPORT_UINT32(op_getxattr)
  NAPI_EXPORT_UINT32(op_listxattr)
  NAPI_EXPORT_UINT32(op_removexattr)
  NAPI_EXPORT_UINT32(op_open)
  NAPI_EXPORT_UINT32(op_opendir)
  NAPI_EXPORT_UINT32(op_read)
  NAPI_EXPORT_UINT32(op_write)
  NAPI_EXPORT_UINT32(op_release)
  NAPI_EXPORT_UINT32(op_releasedir)
  NAPI_EXPORT_UINT32(op_create)
  NAPI_EXPORT_UINT32(op_unlink)
  NAPI_EXPORT_UINT32(op_rename)
  NAPI_EXPORT_UINT32(op_link)
  NAPI_EXPORT_UINT32(op_symlink)
  NAPI_EXPORT_UINT32(op_mkdir)
  NAPI_EXPORT_UINT32(op_rmdir)
}
