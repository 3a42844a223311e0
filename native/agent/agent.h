// strata-agent: the in-sandbox init and request server. Shared declarations.
// Wire format and the security argument: native/agent/README.md. The TypeScript
// side of the protocol is sandbox/backends/agent/protocol.ts; the two must agree
// on every constant below.
#ifndef STRATA_AGENT_H
#define STRATA_AGENT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define AGENT_PROTO_VERSION 1

// Frame: u32 BE length (type byte + payload), u8 type, payload.
#define FRAME_HDR 5
#define MAX_PAYLOAD (1u << 20)       // 1 MiB: requests, argv+env, data chunks
#define DATA_CHUNK (64u * 1024)      // data frames the agent sends
#define STDIN_WINDOW (256u * 1024)   // initial stdin credit of an exec (bytes)
#define MAX_OUTPUT_CAP (64ull << 20) // largest per-stream maxOutputBytes accepted

// client -> agent
enum {
  F_PING = 0x01,
  F_EXEC = 0x02,
  F_DATA = 0x03,   // stdin bytes, file contents, tar bytes
  F_EOF = 0x04,    // end of the client's data
  F_SIGNAL = 0x05, // signal a running exec
  F_SHUTDOWN = 0x06,
  F_FREAD = 0x10,
  F_FWRITE = 0x11,
  F_FLIST = 0x12,
  F_FSTAT = 0x13,
  F_FMKDIR = 0x14,
  F_FREMOVE = 0x15,
  F_FRENAME = 0x16,
  F_TAR_PUT = 0x17,
  F_TAR_GET = 0x18,
};

// agent -> client
enum {
  R_PONG = 0x81,
  R_STARTED = 0x82,
  R_STDOUT = 0x83,
  R_STDERR = 0x84,
  R_GAP = 0x85,    // bytes of a stream were dropped here (head/tail cap)
  R_EXIT = 0x86,
  R_WINDOW = 0x87, // more stdin credit
  R_DATA = 0x88,
  R_ENTRY = 0x89,  // one directory entry or stat result
  R_DONE = 0x8a,
  R_WARN = 0x8b,   // TAR_GET: an entry that was skipped or archived incomplete (fields as R_ERROR); the request goes on
  R_ERROR = 0x8f,
};

// TLV keys: u8 key, u32 BE length, value. Integers are always 8 bytes BE.
enum {
  K_PATH = 0x01, K_PATH2 = 0x02, K_MODE = 0x03, K_FLAGS = 0x04, K_UID = 0x05, K_GID = 0x06,
  K_USER = 0x07, K_OFFSET = 0x08, K_LENGTH = 0x09,
  K_ARG = 0x10, K_SHELL = 0x11, K_ENV = 0x12, K_CWD = 0x13, K_TIMEOUT_MS = 0x14,
  K_MAX_OUTPUT = 0x15, K_SIGNO = 0x16, K_GRACE_MS = 0x17,
  K_EXIT_CODE = 0x20, K_TERM_SIGNAL = 0x21, K_TIMED_OUT = 0x22, K_DURATION_MS = 0x23,
  K_DROPPED_OUT = 0x24, K_DROPPED_ERR = 0x25, K_PID = 0x26, K_CORE_DUMPED = 0x27,
  K_STREAM = 0x28, K_BYTES = 0x29, K_VERSION = 0x2a, K_TOTAL_OUT = 0x2b, K_TOTAL_ERR = 0x2c,
  K_ERRNO = 0x30, K_ERRNAME = 0x31, K_MESSAGE = 0x32,
  K_NAME = 0x40, K_TYPE = 0x41, K_SIZE = 0x42, K_MTIME_NS = 0x43, K_TARGET = 0x44, K_NLINK = 0x45,
};

// K_FLAGS bits per request
#define EXEC_STDIN 1u       // stdin is a pipe fed by F_DATA/F_EOF (else /dev/null)
#define EXEC_CLEAR_ENV 2u   // start from an empty environment instead of the agent's
#define SIGNAL_GROUP 1u     // signal the whole process group
#define FWRITE_APPEND 1u
#define FWRITE_MKDIRS 2u
#define FWRITE_EXCL 4u
#define FSTAT_NOFOLLOW 1u
#define FMKDIR_PARENTS 1u
#define FREMOVE_RECURSIVE 1u
#define FREMOVE_FORCE 2u
#define FRENAME_NOREPLACE 1u
#define TARPUT_OWNER 1u     // apply uid/gid from the archive (root only)

// ---- byte buffers (proto.c)
struct buf {
  uint8_t *p;
  size_t off; // consumed prefix
  size_t len; // end of valid bytes
  size_t cap;
};
int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *data, size_t n);
void buf_consume(struct buf *b, size_t n);
void buf_free(struct buf *b);
static inline size_t buf_pending(const struct buf *b) { return b->len - b->off; }

// Frame building: start a frame, add fields, finish it. Returns 0 or -1 (ENOMEM).
size_t frame_begin(struct buf *b, uint8_t type);
void frame_end(struct buf *b, size_t start);
int put_u64(struct buf *b, uint8_t key, uint64_t v);
int put_str(struct buf *b, uint8_t key, const char *s);
int put_raw(struct buf *b, const void *data, size_t n);
int frame_error(struct buf *b, int err, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// TLV iteration over a request payload
struct tlv {
  const uint8_t *p;
  size_t len, pos;
};
// 1: *key/*val/*vlen set; 0: end; -1: malformed (a field overruns the payload)
int tlv_next(struct tlv *t, uint8_t *key, const uint8_t **val, uint32_t *vlen);
// 0 or -1 when the value is not exactly 8 bytes
int tlv_u64(const uint8_t *val, uint32_t vlen, uint64_t *out);
// malloc'd NUL-terminated copy; NULL when the value contains NUL (errno EINVAL) or no memory
char *tlv_str(const uint8_t *val, uint32_t vlen);
// Checks the whole payload is well-formed TLV.
bool tlv_valid(const uint8_t *p, size_t len);

// Parses a frame header at p (>= 5 bytes). 0 ok (*type, *plen set), -1 bad length.
int frame_header(const uint8_t *p, uint8_t *type, uint32_t *plen);

const char *errno_name(int e);
int64_t now_ms(void);
void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// ---- identities (user.c)
#define MAX_GROUPS 64
struct ident {
  bool set;            // switch identity at all
  uid_t uid;
  gid_t gid;
  bool have_groups;
  int ngroups;
  gid_t groups[MAX_GROUPS];
  char name[256];      // "" when unknown
  char home[1024];     // "" when unknown
};
// Resolves USER (a name, or a numeric id) and UID/GID overrides against the
// image's /etc/passwd and /etc/group. 0 ok; otherwise an errno with msg set.
int resolve_ident(const char *user, bool has_uid, uint64_t uid, bool has_gid, uint64_t gid,
                  struct ident *out, char *msg, size_t msglen);
// setgroups/setgid/setuid in that order; 0 or errno (stage in *what).
int apply_ident(const struct ident *id, const char **what);

// ---- blocking frame I/O for forked workers (files.c)
struct wconn {
  int fd;
  struct buf in;  // bytes read but not consumed
  struct buf out; // frames not yet written
};
int w_flush(struct wconn *c);
int w_read_frame(struct wconn *c, uint8_t *type, uint8_t **payload, uint32_t *plen);
void w_error(struct wconn *c, int err, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Reads the next F_DATA payload; returns bytes (>0), 0 at F_EOF, -1 on error (reported).
ssize_t w_read_data(struct wconn *c, uint8_t **data);

// Runs one file request to completion on a blocking connection, then exits.
void file_worker(int fd, uint8_t type, const uint8_t *payload, uint32_t plen,
                 const uint8_t *rest, size_t restlen) __attribute__((noreturn));

// tar.c
int tar_get(struct wconn *c, const char *path);              // 0 ok, -1 reported
int tar_put(struct wconn *c, const char *path, uint64_t flags); // 0 ok, -1 reported

// Writes that turn zero blocks into holes (files.c)
#define SPARSE_BLOCK 4096u
struct sparse {
  int fd;
  bool on;          // a regular file written from offset 0, not O_APPEND
  bool hole_at_end; // the last bytes were skipped: sparse_finish sets the size
  uint64_t off;     // bytes written or skipped so far
  size_t blen;      // bytes of a partial block waiting in blk (sparse_finish writes them)
  uint8_t blk[SPARSE_BLOCK];
};
void sparse_init(struct sparse *s, int fd, bool may_seek);
int sparse_write(struct sparse *s, const uint8_t *p, size_t n); // 0 or -1 (errno)
int sparse_finish(struct sparse *s);                           // 0 or -1 (errno); before close: it writes what waits

// Common helpers (files.c)
int mkdir_p(const char *path, mode_t mode);
void close_from(int lowfd);
void drop_ptrace_cap(void);

#endif
