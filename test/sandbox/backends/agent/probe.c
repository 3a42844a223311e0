// Attack probe for the agent tests: run inside a sandbox as an ordinary
// workload, it tries every way we know to reach, signal, trace or impersonate
// the agent (PID 1) and prints one "name result" line per attempt, where result
// is "ok" or the errno name. Built static by the test helper, so it runs in any
// rootfs. Usage: probe attacks | probe leaked SOCKET_PATH | probe hello
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *en(int e) {
  switch (e) {
    case 0: return "ok";
    case EPERM: return "EPERM"; case EACCES: return "EACCES"; case ENOENT: return "ENOENT";
    case ESRCH: return "ESRCH"; case EINVAL: return "EINVAL"; case ENOSYS: return "ENOSYS";
    case ECONNREFUSED: return "ECONNREFUSED"; case ECONNRESET: return "ECONNRESET"; case EPIPE: return "EPIPE";
    case ENXIO: return "ENXIO"; case EBADF: return "EBADF"; case ENOTDIR: return "ENOTDIR";
    default: { static char b[32]; snprintf(b, sizeof b, "errno%d", e); return b; }
  }
}

static void report(const char *name, int rc) { printf("%s %s\n", name, en(rc < 0 ? errno : 0)); fflush(stdout); }

// A valid PING frame and a valid EXEC frame (argv: /bin/touch /tmp/pwned).
static size_t exec_frame(uint8_t *out) {
  const char *args[] = { "/bin/touch", "/tmp/pwned" };
  size_t n = 5;
  for (int i = 0; i < 2; i++) {
    uint32_t l = (uint32_t)strlen(args[i]);
    out[n] = 0x10;
    out[n + 1] = 0; out[n + 2] = 0; out[n + 3] = (uint8_t)(l >> 8); out[n + 4] = (uint8_t)l;
    memcpy(out + n + 5, args[i], l);
    n += 5 + l;
  }
  uint32_t len = (uint32_t)(n - 4);
  out[0] = (uint8_t)(len >> 24); out[1] = (uint8_t)(len >> 16); out[2] = (uint8_t)(len >> 8); out[3] = (uint8_t)len;
  out[4] = 0x02;
  return n;
}

// Connects to path and sends PING + EXEC; prints whether anything answered.
static void try_socket(const char *label, const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) { printf("%s connect-%s\n", label, en(errno)); close(fd); return; }
  uint8_t buf[256];
  size_t n = exec_frame(buf);
  ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
  struct timeval tv = { 2, 0 };
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  // Read until the peer closes (an agent answering STARTED ... EXIT), so a
  // forged exec is not killed early by our own disconnect.
  ssize_t r = recv(fd, buf, sizeof buf, 0), total = r > 0 ? r : 0;
  uint8_t first = r >= 5 ? buf[4] : 0;
  int err = r < 0 ? errno : 0;
  while (r > 0) { uint8_t more[4096]; r = recv(fd, more, sizeof more, 0); if (r > 0) total += r; }
  if (total > 0) printf("%s answered (sent %zd, got %zd bytes, first frame type 0x%02x)\n", label, w, total, first);
  else printf("%s refused-%s\n", label, err ? en(err) : "eof");
  close(fd);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "hello")) { printf("hello from a static binary\n"); return 0; }
  if (!strcmp(argv[1], "leaked") && argc > 2) { try_socket("leaked", argv[2]); return 0; }
  if (strcmp(argv[1], "attacks")) return 2;

  // (a) reach the control socket through /proc
  report("open_proc1_fd3", open("/proc/1/fd/3", O_RDWR));
  char lb[256];
  report("readlink_proc1_fd3", (int)readlink("/proc/1/fd/3", lb, sizeof lb));
  DIR *d = opendir("/proc/1/fd");
  report("opendir_proc1_fd", d ? 0 : -1);
  d = opendir("/proc/1/root/");
  report("opendir_proc1_root", d ? 0 : -1);
  report("open_proc1_ns_mnt", open("/proc/1/ns/mnt", O_RDONLY));
  // (d) memory and environment
  report("open_proc1_environ", open("/proc/1/environ", O_RDONLY));
  report("open_proc1_mem", open("/proc/1/mem", O_RDONLY));
  char buf[64];
  struct iovec li = { buf, sizeof buf }, ri = { (void *)0x400000, sizeof buf };
  report("process_vm_readv", (int)process_vm_readv(1, &li, 1, &ri, 1, 0));
  // (c) trace it
  report("ptrace_attach", (int)ptrace(PTRACE_ATTACH, 1, 0, 0));
  report("ptrace_seize", (int)ptrace(PTRACE_SEIZE, 1, 0, 0));
  int pfd = (int)syscall(SYS_pidfd_open, 1, 0);
  report("pidfd_open", pfd);
  if (pfd >= 0) report("pidfd_getfd_3", (int)syscall(SYS_pidfd_getfd, pfd, 3, 0));
  // control: tracing our own child works, so the refusals above are about PID 1
  pid_t c = fork();
  if (c == 0) { pause(); _exit(0); }
  int rc = (int)ptrace(PTRACE_ATTACH, c, 0, 0);
  report("ptrace_own_child", rc);
  if (rc == 0) { waitpid(c, NULL, 0); ptrace(PTRACE_DETACH, c, 0, 0); }
  kill(c, SIGKILL);
  waitpid(c, NULL, 0);
  // (b) signal it: the kernel drops unhandled signals to a pid-ns init; the
  // agent reads blocked ones through signalfd and ignores senders inside.
  report("kill_KILL_1", kill(1, SIGKILL));
  report("kill_STOP_1", kill(1, SIGSTOP));
  report("kill_TERM_1", kill(1, SIGTERM));
  report("kill_INT_1", kill(1, SIGINT));
  report("kill_HUP_1", kill(1, SIGHUP));
  // A standard signal already pending is not queued twice: let the agent
  // drain the ones above so the forged one below is really delivered.
  usleep(200 * 1000);
  siginfo_t si;
  memset(&si, 0, sizeof si);
  si.si_signo = SIGTERM;
  si.si_code = SI_QUEUE; // forged: claims si_pid 0, as if sent from outside
  si.si_pid = 0;
  si.si_uid = 0;
  report("sigqueue_forged_TERM_1", (int)syscall(SYS_rt_sigqueueinfo, 1, SIGTERM, &si));
  si.si_code = SI_USER;
  report("sigqueue_SI_USER_1", (int)syscall(SYS_rt_sigqueueinfo, 1, SIGTERM, &si));
  // (e) every unix socket reachable by path in our mount namespace
  FILE *f = fopen("/proc/net/unix", "r");
  int found = 0;
  if (f) {
    char line[1024];
    while (fgets(line, sizeof line, f)) {
      char *p = strrchr(line, ' ');
      if (!p || p[1] != '/') continue;
      p[strcspn(p, "\n")] = 0;
      found++;
      try_socket("netunix_socket", p + 1);
    }
    fclose(f);
  }
  printf("netunix_paths %d\n", found);
  // a socket pair of our own carries our own (non-zero) pid as SO_PEERCRED
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0) {
    struct ucred cr;
    socklen_t l = sizeof cr;
    getsockopt(sp[0], SOL_SOCKET, SO_PEERCRED, &cr, &l);
    printf("socketpair_peer_pid %d\n", (int)cr.pid);
  }
  // capabilities we hold (the agent strips CAP_SYS_PTRACE from every workload)
  f = fopen("/proc/self/status", "r");
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f))
      if (!strncmp(line, "CapEff:", 7) || !strncmp(line, "CapBnd:", 7) || !strncmp(line, "CapPrm:", 7)) {
        unsigned long long v = strtoull(line + 8, NULL, 16);
        line[6] = 0;
        printf("%s_sys_ptrace %d\n", line, (int)((v >> 19) & 1));
      }
    fclose(f);
  }
  return 0;
}
