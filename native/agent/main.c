// strata-agent: PID 1 of a sandbox. It reaps every zombie in the pid namespace,
// turns SIGTERM/SIGINT/SIGHUP from outside the sandbox into a graceful
// shutdown, and serves requests on the listening socket the host passes as
// fd 3. One single-threaded epoll loop owns the listener, the signalfd, every
// client connection and the pipes of every running exec, so no client can
// block another; file operations (which may block on disk or FUSE) run in
// forked workers. Security argument and wire format: README.md.
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define LISTEN_FD 3
#define MAX_CONNS 1024
#define MAX_EXECS 1024
#define MAX_WORKERS 256
#define OUT_HIGH (256u * 1024) // stop reading a workload's pipe while this much is unsent
#define DRAIN_MS 200           // after the main process exits, wait this long for pipe EOF
#define CREDIT_BATCH (32u * 1024)
#define DEFAULT_GRACE_MS 10000
#define LINGER_MS 5000

enum wkind { W_LISTEN = 1, W_SIGNAL, W_CONN, W_STREAM, W_STDIN, W_ERRPIPE };

struct watch {
  int kind;
  void *obj;
  int idx;
};

struct exec;

struct conn {
  struct watch w;
  int fd;
  struct buf in, out;
  uint32_t ev;     // events currently registered
  bool used;       // the request frame was seen
  bool closing;    // close once `out` is flushed; ignore further input
  bool rd_eof;     // peer shut down its writing side
  bool lingering;  // final reply sent and our side shut down; waiting for the peer to close
  int64_t linger_until;
  bool dead;
  struct exec *ex;
  struct conn *next;
};

struct stream {
  struct watch w;
  int fd; // -1 once closed
  bool reg;
  uint64_t total; // bytes the workload wrote
  uint8_t *ring;  // last tail_limit bytes once past the head
  uint64_t rpos, rfill;
};

struct exec {
  struct conn *c; // NULL once the client went away
  pid_t pid;
  int64_t start, end, deadline, drain_deadline;
  bool reaped, timed_out, started, failed, dead;
  int status;
  uint64_t cap, head_limit, tail_limit;
  struct stream s[2];
  int in_fd;
  struct watch in_w;
  bool in_reg, in_eof;
  struct buf in_pending;
  uint64_t credit_due;
  int err_fd;
  struct watch err_w;
  struct buf errbuf;
  struct exec *next;
};

static struct {
  int ep, sfd;
  bool pid1, peer_check;
  int64_t grace_ms;
  struct watch lw, sw;
  bool listen_reg;
  int64_t listen_retry_at;
  struct conn *conns;
  int nconns;
  struct exec *execs;
  int nexecs;
  pid_t workers[MAX_WORKERS];
  int nworkers;
  bool shutting, hard_killed;
  int64_t shutdown_deadline;
  uint8_t rbuf[DATA_CHUNK];
} G;

// ---------------------------------------------------------------- epoll

static void ep_ctl(int op, int fd, struct watch *w, uint32_t ev) {
  struct epoll_event e = { .events = ev, .data.ptr = w };
  if (epoll_ctl(G.ep, op, fd, &e) < 0 && op != EPOLL_CTL_DEL) logmsg("epoll_ctl(%d, fd %d): %s", op, fd, strerror(errno));
}

static void set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

// ---------------------------------------------------------------- connections

static void conn_update(struct conn *c) {
  if (c->dead) return;
  // A connection stays registered even with no events so that EPOLLHUP (the
  // peer closed both directions) is still reported; that is how a vanished
  // client of a quiet exec is noticed.
  uint32_t ev = 0;
  if (!c->rd_eof) ev |= EPOLLIN;
  if (buf_pending(&c->out)) ev |= EPOLLOUT;
  if (ev != c->ev) {
    ep_ctl(EPOLL_CTL_MOD, c->fd, &c->w, ev);
    c->ev = ev;
  }
}

static void exec_client_gone(struct exec *ex);

static void conn_kill(struct conn *c) {
  if (c->dead) return;
  c->dead = true;
  if (c->ex) exec_client_gone(c->ex);
  c->ex = NULL;
  close(c->fd);
  c->fd = -1;
  G.nconns--;
}

static void exec_resume(struct exec *ex);

static void conn_flush(struct conn *c) {
  if (c->dead) return;
  while (buf_pending(&c->out)) {
    ssize_t n = send(c->fd, c->out.p + c->out.off, buf_pending(&c->out), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) { buf_consume(&c->out, (size_t)n); continue; }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    conn_kill(c); // EPIPE/ECONNRESET: the client is gone
    return;
  }
  if (!buf_pending(&c->out)) {
    // Give memory back after a burst (a capped exec's tail can be megabytes).
    if (c->out.cap > 1024 * 1024) buf_free(&c->out);
    if (c->closing && !c->lingering) {
      // Lingering close: closing a unix socket with unread input makes the
      // peer's next read or write fail with ECONNRESET, and a client still
      // streaming (stdin, a file upload) could lose the error reply queued
      // just before. So shut down our side and read and discard until the
      // client closes, or LINGER_MS passes.
      if (c->rd_eof) { conn_kill(c); return; }
      shutdown(c->fd, SHUT_WR);
      c->lingering = true;
      c->linger_until = now_ms() + LINGER_MS;
    }
  }
  conn_update(c);
  if (c->ex && buf_pending(&c->out) < OUT_HIGH / 2) exec_resume(c->ex);
}

// Queues an error reply and closes the connection after it is sent.
static void conn_fail(struct conn *c, int err, const char *fmt, const char *arg) {
  if (c->dead) return;
  if (frame_error(&c->out, err, NULL, fmt, arg) < 0) { conn_kill(c); return; }
  c->closing = true;
  conn_flush(c);
}

static void conn_new(int fd) {
  struct conn *c = calloc(1, sizeof *c);
  if (!c) { close(fd); return; }
  c->w.kind = W_CONN;
  c->w.obj = c;
  c->fd = fd;
  c->ev = EPOLLIN;
  c->next = G.conns;
  G.conns = c;
  G.nconns++;
  ep_ctl(EPOLL_CTL_ADD, fd, &c->w, EPOLLIN);
}

// ---------------------------------------------------------------- listener

static void listen_pause(int64_t retry_at) {
  if (G.listen_reg) { ep_ctl(EPOLL_CTL_DEL, LISTEN_FD, &G.lw, 0); G.listen_reg = false; }
  G.listen_retry_at = retry_at;
}

static void listen_resume(void) {
  if (!G.listen_reg) { ep_ctl(EPOLL_CTL_ADD, LISTEN_FD, &G.lw, EPOLLIN); G.listen_reg = true; }
  G.listen_retry_at = 0;
}

static void on_listen(void) {
  for (int i = 0; i < 64; i++) {
    if (G.nconns >= MAX_CONNS) { listen_pause(now_ms() + 50); return; }
    int fd = accept4(LISTEN_FD, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) listen_pause(now_ms() + 100);
      return;
    }
    if (G.peer_check) {
      // Defence in depth: the socket path is not in the sandbox's mount
      // namespace, but should it ever leak, a connection from a process inside
      // our pid namespace is refused. SO_PEERCRED holds the pid of whoever
      // called connect(), translated into our pid namespace: 0 means the peer
      // lives outside it (the host), anything else is a sandbox process.
      struct ucred cr;
      socklen_t l = sizeof cr;
      if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0 || cr.pid != 0) {
        logmsg("refused a connection from pid %d inside the sandbox", l == sizeof cr ? (int)cr.pid : -1);
        close(fd);
        continue;
      }
    }
    conn_new(fd);
  }
}

// ---------------------------------------------------------------- exec

static void exec_free_streams(struct exec *ex) {
  for (int i = 0; i < 2; i++) {
    struct stream *s = &ex->s[i];
    if (s->fd >= 0) { close(s->fd); s->fd = -1; s->reg = false; }
  }
  if (ex->in_fd >= 0) { close(ex->in_fd); ex->in_fd = -1; ex->in_reg = false; }
  if (ex->err_fd >= 0) { close(ex->err_fd); ex->err_fd = -1; }
}

static void stream_set(struct exec *ex, int i, bool on) {
  struct stream *s = &ex->s[i];
  if (s->fd < 0 || s->reg == on) return;
  // DEL/ADD rather than MOD to 0: a pipe whose writer closed reports EPOLLHUP
  // even with no events requested, which would spin the loop while paused.
  ep_ctl(on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, s->fd, &s->w, EPOLLIN);
  s->reg = on;
}

// A stream is read while its head still fits in the client's queue, and always
// once it is past the head (those bytes only go into the fixed-size tail ring).
static bool stream_can_read(struct exec *ex, int i) {
  if (!ex->c) return true;
  if (ex->s[i].total >= ex->head_limit) return true;
  return buf_pending(&ex->c->out) < OUT_HIGH;
}

static void exec_resume(struct exec *ex) {
  if (!ex->started || ex->dead) return;
  for (int i = 0; i < 2; i++) if (ex->s[i].fd >= 0 && !ex->s[i].reg && stream_can_read(ex, i)) stream_set(ex, i, true);
}

static void ring_put(struct exec *ex, struct stream *s, const uint8_t *p, size_t n) {
  uint64_t cap = ex->tail_limit;
  if (!cap || !n) return;
  if (!s->ring) {
    s->ring = malloc(cap);
    if (!s->ring) return; // the tail is lost but the counts stay right
  }
  if (n >= cap) {
    memcpy(s->ring, p + n - cap, cap);
    s->rpos = 0;
    s->rfill = cap;
    return;
  }
  size_t first = (size_t)(cap - s->rpos) < n ? (size_t)(cap - s->rpos) : n;
  memcpy(s->ring + s->rpos, p, first);
  if (n > first) memcpy(s->ring, p + first, n - first);
  s->rpos = (s->rpos + n) % cap;
  s->rfill = s->rfill + n > cap ? cap : s->rfill + n;
}

static int send_data(struct conn *c, uint8_t type, const uint8_t *p, size_t n) {
  while (n) {
    size_t k = n > DATA_CHUNK ? DATA_CHUNK : n;
    size_t st = frame_begin(&c->out, type);
    if (st == (size_t)-1 || put_raw(&c->out, p, k) < 0) return -1;
    frame_end(&c->out, st);
    p += k;
    n -= k;
  }
  return 0;
}

static void exec_check_done(struct exec *ex);

// Reads what the pipe has, up to max_reads reads (or until the client's queue
// is full while still in the head). Returns true once the pipe hit EOF (it is
// closed then).
static bool stream_pull(struct exec *ex, int i, int max_reads) {
  struct stream *s = &ex->s[i];
  bool eof = false;
  for (int iter = 0; iter < max_reads && s->fd >= 0; iter++) {
    if (!stream_can_read(ex, i)) { stream_set(ex, i, false); break; }
    ssize_t n = read(s->fd, G.rbuf, sizeof G.rbuf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {
      close(s->fd);
      s->fd = -1;
      s->reg = false;
      eof = true;
      break;
    }
    size_t h = 0;
    if (s->total < ex->head_limit) {
      uint64_t room = ex->head_limit - s->total;
      h = (uint64_t)n < room ? (size_t)n : (size_t)room;
    }
    if (h && ex->c && send_data(ex->c, i == 0 ? R_STDOUT : R_STDERR, G.rbuf, h) < 0) { conn_kill(ex->c); }
    ring_put(ex, s, G.rbuf + h, (size_t)n - h);
    s->total += (uint64_t)n;
  }
  if (ex->c) conn_flush(ex->c);
  return eof;
}

static void stream_read(struct exec *ex, int i) {
  if (stream_pull(ex, i, 16)) exec_check_done(ex); // may finish the exec and flush its connection
}

static uint64_t dropped(struct exec *ex, int i) {
  return ex->cap && ex->s[i].total > ex->cap ? ex->s[i].total - ex->cap : 0;
}

static void exec_finish(struct exec *ex) {
  exec_free_streams(ex);
  struct conn *c = ex->c;
  if (c && !c->dead) {
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++) {
      struct stream *s = &ex->s[i];
      if (s->total <= ex->head_limit || !s->rfill) continue;
      if (dropped(ex, i)) {
        size_t st = frame_begin(&c->out, R_GAP);
        rc |= put_u64(&c->out, K_STREAM, (uint64_t)i + 1) | put_u64(&c->out, K_BYTES, dropped(ex, i));
        frame_end(&c->out, st);
      }
      uint8_t t = i == 0 ? R_STDOUT : R_STDERR;
      if (s->rfill < ex->tail_limit) rc |= send_data(c, t, s->ring, s->rfill);
      else {
        rc |= send_data(c, t, s->ring + s->rpos, ex->tail_limit - s->rpos);
        rc |= send_data(c, t, s->ring, s->rpos);
      }
    }
    size_t st = frame_begin(&c->out, R_EXIT);
    if (WIFEXITED(ex->status)) rc |= put_u64(&c->out, K_EXIT_CODE, (uint64_t)WEXITSTATUS(ex->status));
    else if (WIFSIGNALED(ex->status)) {
      rc |= put_u64(&c->out, K_TERM_SIGNAL, (uint64_t)WTERMSIG(ex->status));
      if (WCOREDUMP(ex->status)) rc |= put_u64(&c->out, K_CORE_DUMPED, 1);
    }
    rc |= put_u64(&c->out, K_TIMED_OUT, ex->timed_out) |
          put_u64(&c->out, K_DURATION_MS, (uint64_t)(ex->end - ex->start)) |
          put_u64(&c->out, K_DROPPED_OUT, dropped(ex, 0)) | put_u64(&c->out, K_DROPPED_ERR, dropped(ex, 1)) |
          put_u64(&c->out, K_TOTAL_OUT, ex->s[0].total) | put_u64(&c->out, K_TOTAL_ERR, ex->s[1].total);
    frame_end(&c->out, st);
    c->ex = NULL;
    c->closing = true;
    if (rc) conn_kill(c);
    else conn_flush(c);
  }
  for (int i = 0; i < 2; i++) { free(ex->s[i].ring); ex->s[i].ring = NULL; }
  buf_free(&ex->in_pending);
  buf_free(&ex->errbuf);
  ex->c = NULL;
  ex->dead = true;
  G.nexecs--;
}

static void exec_check_done(struct exec *ex) {
  if (ex->dead || !ex->reaped) return;
  if (ex->failed) { // the error was reported when the child's error pipe closed
    exec_free_streams(ex);
    buf_free(&ex->in_pending);
    buf_free(&ex->errbuf);
    ex->dead = true;
    G.nexecs--;
    return;
  }
  if (!ex->started) return;
  if (ex->s[0].fd >= 0 || ex->s[1].fd >= 0) {
    // The main process is gone but something (a background child) still
    // holds a pipe open. Give it DRAIN_MS, counted from when the exec was both
    // reaped and started; then take what is already in the pipes and close
    // them. A stream paused by a slow client is waited for, not cut.
    int64_t now = now_ms();
    if (!ex->drain_deadline) ex->drain_deadline = now + DRAIN_MS;
    if (now < ex->drain_deadline) return;
    for (int i = 0; i < 2; i++) if (ex->s[i].fd >= 0 && !stream_can_read(ex, i)) return;
    for (int i = 0; i < 2; i++) stream_pull(ex, i, 16); // what is buffered: at most 1 MiB per stream
  }
  exec_finish(ex);
}

static void exec_kill_group(struct exec *ex, int sig) {
  if (kill(-ex->pid, sig) < 0 && !ex->reaped) kill(ex->pid, sig);
}

// The client disconnected before EXIT: nobody will read the result, so the
// whole process group is killed (DSec's aether does the same when a session
// ends). Output is drained and discarded until the process is reaped.
static void exec_client_gone(struct exec *ex) {
  ex->c = NULL;
  if (!ex->reaped) exec_kill_group(ex, SIGKILL);
  buf_free(&ex->in_pending);
  if (ex->in_fd >= 0) { close(ex->in_fd); ex->in_fd = -1; ex->in_reg = false; }
  exec_resume(ex);
}

static void stdin_pump(struct exec *ex) {
  while (buf_pending(&ex->in_pending) && ex->in_fd >= 0) {
    ssize_t n = write(ex->in_fd, ex->in_pending.p + ex->in_pending.off, buf_pending(&ex->in_pending));
    if (n > 0) { buf_consume(&ex->in_pending, (size_t)n); ex->credit_due += (uint64_t)n; continue; }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      if (!ex->in_reg) { ep_ctl(EPOLL_CTL_ADD, ex->in_fd, &ex->in_w, EPOLLOUT); ex->in_reg = true; }
      break;
    }
    // EPIPE: the workload closed its stdin. Further input is discarded, and
    // credited, so the client never stalls waiting for window.
    close(ex->in_fd);
    ex->in_fd = -1;
    ex->in_reg = false;
  }
  if (ex->in_fd < 0 && buf_pending(&ex->in_pending)) {
    ex->credit_due += buf_pending(&ex->in_pending);
    buf_consume(&ex->in_pending, buf_pending(&ex->in_pending));
  }
  if (!buf_pending(&ex->in_pending)) {
    if (ex->in_reg) { ep_ctl(EPOLL_CTL_DEL, ex->in_fd, &ex->in_w, 0); ex->in_reg = false; }
    if (ex->in_eof && ex->in_fd >= 0) { close(ex->in_fd); ex->in_fd = -1; }
  }
  struct conn *c = ex->c;
  if (c && ex->credit_due && (ex->credit_due >= CREDIT_BATCH || !buf_pending(&ex->in_pending))) {
    size_t st = frame_begin(&c->out, R_WINDOW);
    if (put_u64(&c->out, K_BYTES, ex->credit_due) < 0) { conn_kill(c); return; }
    frame_end(&c->out, st);
    ex->credit_due = 0;
    conn_flush(c);
  }
}

static void exec_frame(struct exec *ex, uint8_t type, const uint8_t *p, uint32_t n) {
  switch (type) {
    case F_DATA:
      if (ex->in_eof) return;
      if (buf_pending(&ex->in_pending) + n > STDIN_WINDOW + MAX_PAYLOAD) {
        // The client ignored its credit: a broken client, not backpressure.
        logmsg("exec %d: client overran its stdin window", (int)ex->pid);
        struct conn *c = ex->c;
        exec_client_gone(ex);
        if (c) { c->ex = NULL; conn_fail(c, EPROTO, "%s", "stdin window overrun"); }
        return;
      }
      if (ex->in_fd < 0) { ex->credit_due += n; stdin_pump(ex); return; }
      if (buf_append(&ex->in_pending, p, n) < 0) { if (ex->c) conn_kill(ex->c); return; }
      stdin_pump(ex);
      return;
    case F_EOF:
      ex->in_eof = true;
      stdin_pump(ex);
      return;
    case F_SIGNAL: {
      struct tlv t = { p, n, 0 };
      uint8_t k;
      const uint8_t *v;
      uint32_t vl;
      uint64_t sig = 0, flags = 0;
      while (tlv_next(&t, &k, &v, &vl) == 1) {
        if (k == K_SIGNO) tlv_u64(v, vl, &sig);
        else if (k == K_FLAGS) tlv_u64(v, vl, &flags);
      }
      if (sig < 1 || sig > 64) return;
      if (flags & SIGNAL_GROUP) kill(-ex->pid, (int)sig);
      else if (!ex->reaped) kill(ex->pid, (int)sig);
      return;
    }
    default:
      return; // unknown frames mid-exec are ignored
  }
}

// Child side of an exec: everything between fork and execve. Failures are
// written to the CLOEXEC error pipe (fd 3 by then) as errno + message, so the
// client gets a precise error instead of exit code 127.
static void child_fail(int err, const char *fmt, const char *a, const char *b) {
  char msg[600];
  int e = err;
  memcpy(msg, &e, sizeof e);
  int n = snprintf(msg + sizeof e, sizeof msg - sizeof e, fmt, a ? a : "", b ? b : "");
  if (n < 0) n = 0;
  if ((size_t)n > sizeof msg - sizeof e - 1) n = (int)(sizeof msg - sizeof e - 1);
  ssize_t w = write(3, msg, sizeof e + (size_t)n);
  (void)w;
  _exit(127);
}

static const char *env_get(char **env, const char *key) {
  size_t kl = strlen(key);
  for (char **e = env; *e; e++) if (strncmp(*e, key, kl) == 0 && (*e)[kl] == '=') return *e + kl + 1;
  return NULL;
}

// Sets or replaces KEY=VALUE ("KEY" alone removes KEY) in a NULL-terminated env.
static char **env_put(char **env, size_t *n, char *kv) {
  char *eq = strchr(kv, '=');
  size_t kl = eq ? (size_t)(eq - kv) : strlen(kv);
  for (size_t i = 0; i < *n; i++) {
    if (strncmp(env[i], kv, kl) == 0 && env[i][kl] == '=') {
      if (eq) env[i] = kv;
      else { env[i] = env[*n - 1]; env[--*n] = NULL; }
      return env;
    }
  }
  if (!eq) return env;
  char **ne = realloc(env, (*n + 2) * sizeof *ne);
  if (!ne) child_fail(ENOMEM, "out of memory%s%s", NULL, NULL);
  ne[(*n)++] = kv;
  ne[*n] = NULL;
  return ne;
}

static char *kv(const char *k, const char *v) {
  size_t n = strlen(k) + strlen(v) + 2;
  char *s = malloc(n);
  if (!s) child_fail(ENOMEM, "out of memory%s%s", NULL, NULL);
  snprintf(s, n, "%s=%s", k, v);
  return s;
}

// execvp(3) with PATH taken from the workload's environment, not the agent's.
static void exec_path(const char *file, char **argv, char **env) {
  if (strchr(file, '/')) { execve(file, argv, env); return; }
  const char *path = env_get(env, "PATH");
  if (!path) path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  bool eacces = false;
  char full[4096];
  for (const char *p = path;; ) {
    const char *end = strchr(p, ':');
    size_t dl = end ? (size_t)(end - p) : strlen(p);
    int n = dl ? snprintf(full, sizeof full, "%.*s/%s", (int)dl, p, file) : snprintf(full, sizeof full, "%s", file);
    if (n > 0 && (size_t)n < sizeof full) {
      execve(full, argv, env);
      if (errno == EACCES) eacces = true;
      else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ENODEV && errno != ETIMEDOUT) return;
    }
    if (!end) break;
    p = end + 1;
  }
  errno = eacces ? EACCES : ENOENT;
}

extern char **environ;

static void exec_child(const uint8_t *p, uint32_t plen, int in_r, int out_w, int err_w, int errp) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  setsid(); // own session and process group: timeouts and signals hit the whole tree
  if (in_r < 0) {
    in_r = open("/dev/null", O_RDONLY);
    if (in_r < 0) { // an image without /dev/null still gets an empty stdin
      int pp[2];
      if (pipe(pp) == 0) { close(pp[1]); in_r = pp[0]; }
    }
  }
  // All fds involved are >= 4 (0-2 are held open by the agent and 3 is the
  // listener), so the dup2s below cannot clobber each other.
  if (dup2(errp, 3) < 0) _exit(127);
  fcntl(3, F_SETFD, FD_CLOEXEC);
  if ((in_r >= 0 && dup2(in_r, 0) < 0) || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0) child_fail(errno, "dup2%s%s", NULL, NULL);
  close_from(4); // the listener copy was replaced above; every connection and pipe of the agent goes

  char **argv = NULL, **env = NULL, *shell = NULL, *cwd = NULL, *user = NULL;
  size_t argc = 0, envc = 0;
  uint64_t uid = 0, gid = 0, flags = 0;
  bool has_uid = false, has_gid = false;
  struct tlv t = { p, plen, 0 };
  uint8_t k;
  const uint8_t *v;
  uint32_t vl;
  size_t nargs = 0;
  while (tlv_next(&t, &k, &v, &vl) == 1) if (k == K_ARG) nargs++;
  argv = calloc(nargs + 4, sizeof *argv);
  if (!argv) child_fail(ENOMEM, "out of memory%s%s", NULL, NULL);
  t.pos = 0;
  char **reqenv = NULL;
  size_t nreqenv = 0;
  while (tlv_next(&t, &k, &v, &vl) == 1) {
    char *s = NULL;
    if (k == K_ARG || k == K_SHELL || k == K_ENV || k == K_CWD || k == K_USER) {
      s = tlv_str(v, vl);
      if (!s) child_fail(EINVAL, "a string field contains a NUL byte%s%s", NULL, NULL);
    }
    switch (k) {
      case K_ARG: argv[argc++] = s; break;
      case K_SHELL: shell = s; break;
      case K_ENV: {
        char **ne = realloc(reqenv, (nreqenv + 1) * sizeof *ne);
        if (!ne) child_fail(ENOMEM, "out of memory%s%s", NULL, NULL);
        reqenv = ne;
        reqenv[nreqenv++] = s;
        break;
      }
      case K_CWD: cwd = s; break;
      case K_USER: user = s; break;
      case K_UID: has_uid = tlv_u64(v, vl, &uid) == 0; break;
      case K_GID: has_gid = tlv_u64(v, vl, &gid) == 0; break;
      case K_FLAGS: tlv_u64(v, vl, &flags); break;
      default: break;
    }
  }

  struct ident id;
  char msg[512];
  int e = resolve_ident(user, has_uid, uid, has_gid, gid, &id, msg, sizeof msg);
  if (e) child_fail(e, "%s%s", msg, NULL);

  // Environment: the agent's own (the sandbox's configured env) unless
  // cleared, then HOME/USER/LOGNAME of a named user, then the request's.
  env = calloc(1, sizeof *env);
  if (!env) child_fail(ENOMEM, "out of memory%s%s", NULL, NULL);
  if (!(flags & EXEC_CLEAR_ENV)) for (char **ev = environ; *ev; ev++) env = env_put(env, &envc, *ev);
  if (id.set && id.name[0]) {
    env = env_put(env, &envc, kv("USER", id.name));
    env = env_put(env, &envc, kv("LOGNAME", id.name));
    if (id.home[0]) env = env_put(env, &envc, kv("HOME", id.home));
  }
  for (size_t i = 0; i < nreqenv; i++) env = env_put(env, &envc, reqenv[i]);
  if (!env_get(env, "HOME")) {
    struct ident me;
    char m2[64];
    bool found = resolve_ident(NULL, true, id.set ? id.uid : getuid(), false, 0, &me, m2, sizeof m2) == 0 && me.home[0];
    env = env_put(env, &envc, kv("HOME", found ? me.home : "/"));
  }
  if (!env_get(env, "PATH")) env = env_put(env, &envc, kv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));

  if (cwd && chdir(cwd) < 0) child_fail(errno, "cwd %s: %s", cwd, strerror(errno));
  drop_ptrace_cap();
  const char *what = NULL;
  if ((e = apply_ident(&id, &what))) child_fail(e, "%s: %s", what, strerror(e));
  if (cwd && id.set && chdir(cwd) < 0) child_fail(errno, "cwd %s: %s", cwd, strerror(errno)); // permission as the user

  if (shell) {
    char *sargv[] = { "/bin/sh", "-c", shell, NULL };
    execve("/bin/sh", sargv, env);
    if (errno == ENOENT) child_fail(ENOENT, "shell commands need /bin/sh, which this sandbox does not have%s%s; pass argv instead", NULL, NULL);
    child_fail(errno, "exec /bin/sh: %s%s", strerror(errno), NULL);
  }
  exec_path(argv[0], argv, env);
  child_fail(errno, "exec %s: %s", argv[0], strerror(errno));
}

static void exec_start(struct conn *c, const uint8_t *p, uint32_t plen) {
  struct tlv t = { p, plen, 0 };
  uint8_t k;
  const uint8_t *v;
  uint32_t vl;
  uint64_t timeout = 0, cap = 0, flags = 0;
  size_t nargs = 0;
  bool shell = false;
  while (tlv_next(&t, &k, &v, &vl) == 1) {
    if (k == K_ARG) nargs++;
    else if (k == K_SHELL) shell = true;
    else if ((k == K_TIMEOUT_MS && tlv_u64(v, vl, &timeout) < 0) || (k == K_MAX_OUTPUT && tlv_u64(v, vl, &cap) < 0) ||
             (k == K_FLAGS && tlv_u64(v, vl, &flags) < 0)) {
      conn_fail(c, EINVAL, "%s", "integer fields must be 8 bytes");
      return;
    }
  }
  if ((nargs == 0) == !shell) { conn_fail(c, EINVAL, "%s", "exec needs either argv or a shell command"); return; }
  if (cap > MAX_OUTPUT_CAP) { conn_fail(c, EINVAL, "%s", "maxOutputBytes exceeds 64 MiB per stream"); return; }
  if (timeout > 365ull * 24 * 3600 * 1000) { conn_fail(c, EINVAL, "%s", "timeout too large"); return; }
  if (G.nexecs >= MAX_EXECS) { conn_fail(c, EAGAIN, "%s", "too many running execs"); return; }

  int out[2] = { -1, -1 }, err[2] = { -1, -1 }, in[2] = { -1, -1 }, ep[2] = { -1, -1 };
  if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 || pipe2(ep, O_CLOEXEC) < 0 ||
      ((flags & EXEC_STDIN) && pipe2(in, O_CLOEXEC) < 0)) {
    int e = errno;
    int fds[] = { out[0], out[1], err[0], err[1], in[0], in[1], ep[0], ep[1] };
    for (unsigned i = 0; i < 8; i++) if (fds[i] >= 0) close(fds[i]);
    conn_fail(c, e, "pipe: %s", strerror(e));
    return;
  }
  struct exec *ex = calloc(1, sizeof *ex);
  pid_t pid = ex ? fork() : -1;
  if (pid == 0) exec_child(p, plen, in[0], out[1], err[1], ep[1]);
  int e = errno;
  close(out[1]);
  close(err[1]);
  close(ep[1]);
  if (in[0] >= 0) close(in[0]);
  if (pid < 0) {
    close(out[0]); close(err[0]); close(ep[0]);
    if (in[1] >= 0) close(in[1]);
    free(ex);
    conn_fail(c, ex ? e : ENOMEM, "fork: %s", strerror(ex ? e : ENOMEM));
    return;
  }
  ex->c = c;
  ex->pid = pid;
  ex->start = now_ms();
  ex->deadline = timeout ? ex->start + (int64_t)timeout : 0;
  ex->cap = cap;
  ex->head_limit = cap ? cap - cap / 2 : UINT64_MAX;
  ex->tail_limit = cap ? cap / 2 : 0;
  for (int i = 0; i < 2; i++) {
    ex->s[i].w = (struct watch){ W_STREAM, ex, i };
    ex->s[i].fd = i == 0 ? out[0] : err[0];
    set_nonblock(ex->s[i].fd);
  }
  ex->in_fd = in[1];
  ex->in_w = (struct watch){ W_STDIN, ex, 0 };
  if (ex->in_fd >= 0) set_nonblock(ex->in_fd);
  ex->err_fd = ep[0];
  ex->err_w = (struct watch){ W_ERRPIPE, ex, 0 };
  set_nonblock(ex->err_fd);
  ep_ctl(EPOLL_CTL_ADD, ex->err_fd, &ex->err_w, EPOLLIN);
  ex->next = G.execs;
  G.execs = ex;
  G.nexecs++;
  c->ex = ex;
}

// The error pipe closes on a successful execve (CLOEXEC) or carries errno +
// message from exec_child. Output pipes are only watched once it resolved, so
// STARTED always precedes the first output frame.
static void on_errpipe(struct exec *ex) {
  for (;;) {
    if (buf_reserve(&ex->errbuf, 1024) < 0) return;
    ssize_t n = read(ex->err_fd, ex->errbuf.p + ex->errbuf.len, ex->errbuf.cap - ex->errbuf.len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n > 0) {
      ex->errbuf.len += (size_t)n;
      if (ex->errbuf.len > 4096) n = 0; // a child never writes this much; treat as done
      else continue;
    }
    close(ex->err_fd);
    ex->err_fd = -1;
    break;
  }
  struct conn *c = ex->c;
  if (ex->errbuf.len >= sizeof(int)) {
    int e;
    memcpy(&e, ex->errbuf.p, sizeof e);
    char msg[600];
    size_t ml = ex->errbuf.len - sizeof e;
    if (ml >= sizeof msg) ml = sizeof msg - 1;
    memcpy(msg, ex->errbuf.p + sizeof e, ml);
    msg[ml] = 0;
    ex->failed = true;
    exec_free_streams(ex);
    if (c && !c->dead) {
      c->ex = NULL;
      ex->c = NULL;
      conn_fail(c, e > 0 ? e : EIO, "%s", msg);
    }
    exec_check_done(ex);
    return;
  }
  ex->started = true;
  if (c && !c->dead) {
    size_t st = frame_begin(&c->out, R_STARTED);
    if (put_u64(&c->out, K_PID, (uint64_t)ex->pid) | put_u64(&c->out, K_BYTES, STDIN_WINDOW)) { conn_kill(c); }
    else { frame_end(&c->out, st); conn_flush(c); }
  }
  exec_resume(ex);
  exec_check_done(ex);
}

// ---------------------------------------------------------------- shutdown and reaping

static void forward_signal(int sig) {
  if (G.pid1) {
    kill(-1, sig); // every process in the pid namespace except ourselves
    return;
  }
  for (struct exec *ex = G.execs; ex; ex = ex->next) if (!ex->dead) exec_kill_group(ex, sig);
  for (int i = 0; i < G.nworkers; i++) kill(G.workers[i], sig);
}

static void begin_shutdown(int sig, int64_t grace_ms) {
  if (!G.shutting) {
    G.shutting = true;
    G.shutdown_deadline = now_ms() + grace_ms;
    logmsg("shutting down on signal %d (grace %lld ms)", sig, (long long)grace_ms);
  }
  forward_signal(sig);
}

// Reaps every exited child; returns true while children remain.
static bool reap_all(void) {
  for (;;) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid == 0) return true;
    if (pid < 0) { if (errno == EINTR) continue; return false; }
    for (int i = 0; i < G.nworkers; i++) {
      if (G.workers[i] == pid) { G.workers[i] = G.workers[--G.nworkers]; break; }
    }
    for (struct exec *ex = G.execs; ex; ex = ex->next) {
      if (ex->pid != pid || ex->reaped || ex->dead) continue;
      ex->reaped = true;
      ex->status = st;
      ex->end = now_ms();
      ex->drain_deadline = 0; // set once both reaped and started (exec_check_done)
      exec_check_done(ex);
      break;
    }
    // anything else was an orphan re-parented to us: reaped, nothing to report
  }
}

// Outside-signal check. Blocked signals reach a pid-namespace init even from
// inside the namespace (the kernel only drops *unhandled, unblocked* ones), so
// the origin is checked: the kernel sets si_pid to 0 when the sender is outside
// our pid namespace. si_code must also be one a same-namespace process cannot
// forge: rt_sigqueueinfo() refuses si_code >= 0 and SI_TKILL for other
// processes, but would let a workload send SI_QUEUE with a fake si_pid of 0.
static bool signal_from_outside(const struct signalfd_siginfo *si) {
  if (!G.pid1) return true;
  if (si->ssi_pid != 0) return false;
  return si->ssi_code == SI_USER || si->ssi_code == SI_KERNEL || si->ssi_code == SI_TKILL;
}

static void on_signalfd(void) {
  struct signalfd_siginfo si;
  bool child = false;
  for (;;) {
    ssize_t n = read(G.sfd, &si, sizeof si);
    if (n != (ssize_t)sizeof si) break;
    if (si.ssi_signo == SIGCHLD) { child = true; continue; }
    if (!signal_from_outside(&si)) {
      logmsg("ignored signal %u from pid %u inside the sandbox (code %d)", si.ssi_signo, si.ssi_pid, si.ssi_code);
      continue;
    }
    begin_shutdown((int)si.ssi_signo, G.grace_ms);
  }
  if (child) reap_all();
}

static void shutdown_check(int64_t now) {
  bool busy = G.nexecs > 0 || G.nworkers > 0;
  for (struct conn *c = G.conns; c && !busy; c = c->next) if (!c->dead && !c->lingering && buf_pending(&c->out)) busy = true;
  if (!busy && G.pid1 && reap_all()) busy = true; // orphans that are still exiting
  if (!busy) { logmsg("exiting"); exit(0); }
  if (now < G.shutdown_deadline) return;
  if (G.hard_killed) { logmsg("exiting with work left after the grace period"); exit(0); }
  G.hard_killed = true;
  forward_signal(SIGKILL);
  G.shutdown_deadline = now + 2000; // time to report the killed execs
}

// ---------------------------------------------------------------- requests

static void start_worker(struct conn *c, uint8_t type, const uint8_t *p, uint32_t plen, const uint8_t *rest, size_t restlen) {
  if (G.nworkers >= MAX_WORKERS) { conn_fail(c, EAGAIN, "%s", "too many file operations in flight"); return; }
  pid_t pid = fork();
  if (pid < 0) { int e = errno; conn_fail(c, e, "fork: %s", strerror(e)); return; }
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    // The connection becomes fd 3 (replacing the listener copy); everything
    // else the agent holds is closed. p/rest point into this process's copy
    // of the connection buffer.
    if (dup2(c->fd, LISTEN_FD) < 0) _exit(1);
    close_from(4);
    file_worker(LISTEN_FD, type, p, plen, rest, restlen);
  }
  G.workers[G.nworkers++] = pid;
  // The worker owns the connection now; drop our copy without a reply.
  c->closing = true;
  buf_free(&c->out);
  conn_kill(c);
}

static void handle_request(struct conn *c, uint8_t type, const uint8_t *p, uint32_t n, const uint8_t *rest, size_t restlen) {
  c->used = true;
  if (!tlv_valid(p, n)) { conn_fail(c, EPROTO, "%s", "malformed request fields"); return; }
  switch (type) {
    case F_PING: {
      size_t st = frame_begin(&c->out, R_PONG);
      int rc = put_u64(&c->out, K_VERSION, AGENT_PROTO_VERSION) | put_u64(&c->out, K_PID, (uint64_t)getpid());
      if (G.shutting) rc |= put_u64(&c->out, K_FLAGS, 1);
      frame_end(&c->out, st);
      c->closing = true;
      if (rc) conn_kill(c);
      else conn_flush(c);
      return;
    }
    case F_SHUTDOWN: {
      struct tlv t = { p, n, 0 };
      uint8_t k;
      const uint8_t *v;
      uint32_t vl;
      uint64_t grace = (uint64_t)G.grace_ms;
      while (tlv_next(&t, &k, &v, &vl) == 1) if (k == K_GRACE_MS) tlv_u64(v, vl, &grace);
      if (grace > 3600 * 1000) grace = 3600 * 1000;
      size_t st = frame_begin(&c->out, R_DONE);
      frame_end(&c->out, st);
      c->closing = true;
      conn_flush(c);
      begin_shutdown(SIGTERM, (int64_t)grace);
      return;
    }
    case F_EXEC:
      if (G.shutting) { conn_fail(c, ESHUTDOWN, "%s", "the sandbox is shutting down"); return; }
      exec_start(c, p, n);
      return;
    case F_FREAD: case F_FWRITE: case F_FLIST: case F_FSTAT: case F_FMKDIR:
    case F_FREMOVE: case F_FRENAME: case F_TAR_PUT: case F_TAR_GET:
      if (G.shutting) { conn_fail(c, ESHUTDOWN, "%s", "the sandbox is shutting down"); return; }
      start_worker(c, type, p, n, rest, restlen);
      return;
    default: {
      char t[8];
      snprintf(t, sizeof t, "0x%02x", type);
      conn_fail(c, EPROTO, "unknown request type %s", t);
      return;
    }
  }
}

// Parses every complete frame in c->in. Frame lengths are checked before
// anything is buffered beyond the header, so a garbage length costs nothing.
static void conn_process(struct conn *c) {
  while (!c->dead && buf_pending(&c->in) >= FRAME_HDR) {
    if (c->closing) { buf_consume(&c->in, buf_pending(&c->in)); return; }
    uint8_t type;
    uint32_t plen;
    if (frame_header(c->in.p + c->in.off, &type, &plen) < 0) {
      struct exec *ex = c->ex;
      if (ex) { c->ex = NULL; exec_client_gone(ex); }
      buf_consume(&c->in, buf_pending(&c->in));
      conn_fail(c, EPROTO, "%s", "bad frame length");
      return;
    }
    if (buf_pending(&c->in) < FRAME_HDR + (size_t)plen) return;
    const uint8_t *payload = c->in.p + c->in.off + FRAME_HDR;
    const uint8_t *rest = payload + plen;
    size_t restlen = buf_pending(&c->in) - FRAME_HDR - plen;
    if (c->ex) exec_frame(c->ex, type, payload, plen);
    else if (!c->used) handle_request(c, type, payload, plen, rest, restlen);
    if (c->dead) return;
    buf_consume(&c->in, FRAME_HDR + (size_t)plen);
  }
}

static void on_conn(struct conn *c, uint32_t ev) {
  if (ev & EPOLLOUT) conn_flush(c);
  if (c->dead) return;
  if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
    for (int iter = 0; iter < 16 && !c->dead && !c->rd_eof; iter++) {
      if (buf_reserve(&c->in, DATA_CHUNK) < 0) { conn_kill(c); return; }
      ssize_t n = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len, MSG_DONTWAIT);
      if (n > 0) { c->in.len += (size_t)n; conn_process(c); continue; }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0) { conn_kill(c); return; }
      // Orderly EOF from the peer's writing side. A half-close during an exec
      // means "no more input"; the result is still delivered.
      c->rd_eof = true;
      if (c->ex) { c->ex->in_eof = true; stdin_pump(c->ex); }
      else if (!c->used || c->lingering || !buf_pending(&c->out)) { conn_kill(c); return; }
    }
    if (c->dead) return;
    // Drop the input buffer once idle so thousands of idle connections stay small.
    if (!buf_pending(&c->in) && c->in.cap > DATA_CHUNK * 2) buf_free(&c->in);
    if ((ev & (EPOLLHUP | EPOLLERR)) && !(ev & EPOLLIN)) { conn_kill(c); return; }
    conn_update(c);
  }
}

// ---------------------------------------------------------------- main loop

static int next_timeout(int64_t now) {
  int64_t t = -1;
#define CONSIDER(x) do { int64_t d_ = (x) - now; if (d_ < 0) d_ = 0; if (t < 0 || d_ < t) t = d_; } while (0)
  for (struct exec *ex = G.execs; ex; ex = ex->next) {
    if (ex->dead) continue;
    if (ex->deadline && !ex->reaped) CONSIDER(ex->deadline);
    if (ex->reaped && ex->started && ex->drain_deadline > now) CONSIDER(ex->drain_deadline);
  }
  for (struct conn *c = G.conns; c; c = c->next) if (!c->dead && c->lingering) CONSIDER(c->linger_until);
  if (G.listen_retry_at) CONSIDER(G.listen_retry_at);
  if (G.shutting) CONSIDER(G.shutdown_deadline < now + 100 ? G.shutdown_deadline : now + 100);
#undef CONSIDER
  return t < 0 ? -1 : (int)(t > 60000 ? 60000 : t);
}

static void timers(int64_t now) {
  for (struct exec *ex = G.execs; ex; ex = ex->next) {
    if (ex->dead) continue;
    if (ex->deadline && !ex->reaped && now >= ex->deadline) {
      ex->timed_out = true;
      ex->deadline = 0;
      exec_kill_group(ex, SIGKILL);
    }
    if (ex->reaped) exec_check_done(ex);
  }
  for (struct conn *c = G.conns; c; c = c->next) if (!c->dead && c->lingering && now >= c->linger_until) conn_kill(c);
  if (G.listen_retry_at && now >= G.listen_retry_at && G.nconns < MAX_CONNS) listen_resume();
}

static void sweep(void) {
  for (struct conn **pc = &G.conns; *pc;) {
    struct conn *c = *pc;
    if (c->dead) { *pc = c->next; buf_free(&c->in); buf_free(&c->out); free(c); }
    else pc = &c->next;
  }
  for (struct exec **pe = &G.execs; *pe;) {
    struct exec *ex = *pe;
    if (ex->dead) { *pe = ex->next; free(ex); }
    else pe = &ex->next;
  }
}

static void usage(void) {
  dprintf(2, "usage: strata-agent [--grace-ms N] [--no-peer-check]\n"
             "  Serves the Strata sandbox protocol on the listening unix socket passed as fd 3.\n");
}

int main(int argc, char **argv) {
  G.grace_ms = DEFAULT_GRACE_MS;
  bool no_peer_check = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--grace-ms") == 0 && i + 1 < argc) G.grace_ms = strtoll(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--no-peer-check") == 0) no_peer_check = true;
    else if (strcmp(argv[i], "--version") == 0) { dprintf(1, "strata-agent protocol %d\n", AGENT_PROTO_VERSION); return 0; }
    else { usage(); return 2; }
  }
  if (G.grace_ms < 0) G.grace_ms = 0;

  // First, before anything can fork: the control socket must never be
  // inherited, and nothing in the sandbox may ptrace us or open /proc/1/fd/*,
  // /proc/1/mem or /proc/1/environ (non-dumpable processes need CAP_SYS_PTRACE
  // for all of those; see README.md).
  if (fcntl(LISTEN_FD, F_SETFD, FD_CLOEXEC) < 0) { logmsg("fd 3 (the control socket) is not open"); return 2; }
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  int acc = 0, dom = 0;
  socklen_t l = sizeof acc;
  if (getsockopt(LISTEN_FD, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l) < 0 || !acc) {
    logmsg("fd 3 is not a listening socket");
    return 2;
  }
  l = sizeof dom;
  if (getsockopt(LISTEN_FD, SOL_SOCKET, SO_DOMAIN, &dom, &l) < 0 || dom != AF_UNIX) {
    logmsg("fd 3 is not a unix socket");
    return 2;
  }
  G.pid1 = getpid() == 1;
  G.peer_check = G.pid1 && !no_peer_check;
  if (!G.pid1) prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); // orphans of our workloads come back to us

  // fds 0-2 must be occupied so that no pipe or connection lands there.
  for (int fd = 0; fd < 3; fd++) {
    if (fcntl(fd, F_GETFD) >= 0) continue;
    int n = open("/dev/null", O_RDWR);
    if (n < 0) n = open("/", O_RDONLY | O_DIRECTORY);
    if (n >= 0 && n != fd) { dup2(n, fd); close(n); }
  }
  close_from(4); // stray fds a runtime may have leaked

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);
  G.sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  G.ep = epoll_create1(EPOLL_CLOEXEC);
  if (G.sfd < 0 || G.ep < 0) { logmsg("signalfd/epoll: %s", strerror(errno)); return 1; }
  set_nonblock(LISTEN_FD);
  G.lw = (struct watch){ W_LISTEN, NULL, 0 };
  G.sw = (struct watch){ W_SIGNAL, NULL, 0 };
  ep_ctl(EPOLL_CTL_ADD, G.sfd, &G.sw, EPOLLIN);
  listen_resume();
  logmsg("ready (pid1=%d, peer check %s)", G.pid1, G.peer_check ? "on" : "off");

  struct epoll_event evs[64];
  for (;;) {
    int n = epoll_wait(G.ep, evs, 64, next_timeout(now_ms()));
    if (n < 0 && errno != EINTR) { logmsg("epoll_wait: %s", strerror(errno)); return 1; }
    for (int i = 0; i < n; i++) {
      struct watch *w = evs[i].data.ptr;
      uint32_t ev = evs[i].events;
      switch (w->kind) {
        case W_LISTEN: on_listen(); break;
        case W_SIGNAL: on_signalfd(); break;
        case W_CONN: { struct conn *c = w->obj; if (!c->dead) on_conn(c, ev); break; }
        case W_STREAM: { struct exec *ex = w->obj; if (!ex->dead && ex->s[w->idx].fd >= 0) stream_read(ex, w->idx); break; }
        case W_STDIN: { struct exec *ex = w->obj; if (!ex->dead && ex->in_fd >= 0) stdin_pump(ex); break; }
        case W_ERRPIPE: { struct exec *ex = w->obj; if (!ex->dead && ex->err_fd >= 0) on_errpipe(ex); break; }
      }
    }
    int64_t now = now_ms();
    timers(now);
    if (G.shutting) shutdown_check(now);
    sweep();
  }
}
