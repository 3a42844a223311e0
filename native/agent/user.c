// User and group resolution against the image's own /etc/passwd and /etc/group.
// The agent is static and must not use NSS (getpwnam would try to dlopen
// libnss_* from the image, which may not exist or may be a different libc), so
// the files are parsed directly. Absent files are fine: numeric ids still work.
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DB (4u << 20) // refuse absurd passwd/group files instead of reading them whole

// Reads a whole small file; NULL with errno set when absent or too large.
static char *slurp(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct buf b = { 0 };
  for (;;) {
    if (buf_reserve(&b, 8192) < 0) { close(fd); buf_free(&b); return NULL; }
    ssize_t n = read(fd, b.p + b.len, b.cap - b.len);
    if (n < 0) { if (errno == EINTR) continue; int e = errno; close(fd); buf_free(&b); errno = e; return NULL; }
    if (n == 0) break;
    b.len += (size_t)n;
    if (b.len > MAX_DB) { close(fd); buf_free(&b); errno = EFBIG; return NULL; }
  }
  close(fd);
  if (buf_append(&b, "", 1) < 0) { buf_free(&b); return NULL; }
  return (char *)b.p;
}

// Splits line into at most n ':'-separated fields in place; returns the count.
static int split(char *line, char **f, int n) {
  int k = 0;
  f[k++] = line;
  for (char *p = line; *p && k < n; p++) {
    if (*p == ':') { *p = 0; f[k++] = p + 1; }
  }
  return k;
}

static bool parse_id(const char *s, uint64_t *out) {
  if (!*s) return false;
  uint64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return false;
    v = v * 10 + (uint64_t)(*s - '0');
    if (v > 0xfffffffeull) return false; // (uid_t)-1 is "no change" for setuid
  }
  *out = v;
  return true;
}

// Finds a passwd entry by name (when name) or by uid. 1 found, 0 not, -1 no file.
static int find_passwd(const char *name, uint64_t uid, struct ident *id) {
  char *db = slurp("/etc/passwd");
  if (!db) return -1;
  int found = 0;
  for (char *save = NULL, *line = strtok_r(db, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char *f[7];
    if (split(line, f, 7) < 7) continue;
    uint64_t u, g;
    if (!parse_id(f[2], &u) || !parse_id(f[3], &g)) continue;
    if (name ? strcmp(f[0], name) != 0 : u != uid) continue;
    id->uid = (uid_t)u;
    id->gid = (gid_t)g;
    snprintf(id->name, sizeof id->name, "%s", f[0]);
    snprintf(id->home, sizeof id->home, "%s", f[5]);
    found = 1;
    break;
  }
  free(db);
  return found;
}

// Supplementary groups: every /etc/group entry listing the user, plus the
// primary group (what initgroups(3) does).
static void load_groups(struct ident *id) {
  id->have_groups = true;
  id->ngroups = 0;
  id->groups[id->ngroups++] = id->gid;
  if (!id->name[0]) return;
  char *db = slurp("/etc/group");
  if (!db) return;
  for (char *save = NULL, *line = strtok_r(db, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char *f[4];
    if (split(line, f, 4) < 4) continue;
    uint64_t g;
    if (!parse_id(f[2], &g) || (gid_t)g == id->gid) continue;
    for (char *s2 = NULL, *m = strtok_r(f[3], ",", &s2); m; m = strtok_r(NULL, ",", &s2)) {
      if (strcmp(m, id->name) == 0 && id->ngroups < MAX_GROUPS) { id->groups[id->ngroups++] = (gid_t)g; break; }
    }
  }
  free(db);
}

int resolve_ident(const char *user, bool has_uid, uint64_t uid, bool has_gid, uint64_t gid,
                  struct ident *out, char *msg, size_t msglen) {
  memset(out, 0, sizeof *out);
  if (!user && !has_uid && !has_gid) return 0;
  out->set = true;
  out->uid = getuid();
  out->gid = getgid();
  bool from_passwd = false;
  if (user) {
    uint64_t num;
    int r = find_passwd(user, 0, out);
    if (r == 1) from_passwd = true;
    else if (parse_id(user, &num)) {
      out->uid = (uid_t)num;
      out->gid = 0; // like docker --user N without a passwd entry
      if (find_passwd(NULL, num, out) == 1) from_passwd = true;
    } else if (strcmp(user, "root") == 0) {
      // root is uid 0 everywhere: the default user of every sandbox must work in
      // images without /etc/passwd (scratch, distroless, a lone static binary)
      out->uid = 0;
      out->gid = 0;
      snprintf(out->name, sizeof out->name, "root");
    } else {
      snprintf(msg, msglen, r < 0 ? "user %s: the sandbox has no /etc/passwd" : "user %s not found in /etc/passwd", user);
      return ENOENT;
    }
  } else if (has_uid) {
    if (uid > 0xfffffffeull) { snprintf(msg, msglen, "uid %llu out of range", (unsigned long long)uid); return EINVAL; }
    out->uid = (uid_t)uid;
    out->gid = 0;
    if (find_passwd(NULL, uid, out) == 1) from_passwd = true;
  }
  if (has_uid && user) {
    if (uid > 0xfffffffeull) { snprintf(msg, msglen, "uid out of range"); return EINVAL; }
    out->uid = (uid_t)uid;
  }
  if (has_gid) {
    if (gid > 0xfffffffeull) { snprintf(msg, msglen, "gid %llu out of range", (unsigned long long)gid); return EINVAL; }
    out->gid = (gid_t)gid;
  }
  if (from_passwd || user || has_uid) load_groups(out);
  return 0;
}

int apply_ident(const struct ident *id, const char **what) {
  if (!id->set) return 0;
  if (id->have_groups) {
    // An unprivileged agent asked for its own uid may keep its groups; anyone
    // else must not carry the agent's supplementary groups into the workload.
    if (setgroups((size_t)id->ngroups, id->groups) < 0 && !(errno == EPERM && geteuid() == id->uid)) {
      *what = "setgroups";
      return errno;
    }
  }
  if (setgid(id->gid) < 0) { *what = "setgid"; return errno; }
  if (setuid(id->uid) < 0) { *what = "setuid"; return errno; }
  return 0;
}
