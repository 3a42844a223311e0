// Seccomp profile of container sandboxes: default allow, with a deny list in
// the spirit of Docker's default profile for a container without
// CAP_SYS_ADMIN: no new namespaces (unshare, setns, clone with CLONE_NEW*
// flags), no mounts, no kernel keyring, no module or kexec loading, no bpf,
// perf, io_uring, userfaultfd, handle-based opens, reboot, swap, clock or
// accounting changes. Denied calls fail with EPERM; clone3 fails with ENOSYS so
// that libcs fall back to clone, whose flags the filter can inspect.
const EPERM = 1
const ENOSYS = 38

export const DENIED_SYSCALLS = [
  // namespaces and mounts
  'unshare', 'setns', 'mount', 'umount', 'umount2', 'pivot_root',
  'fsopen', 'fsconfig', 'fsmount', 'fspick', 'move_mount', 'open_tree', 'mount_setattr',
  // kernel keyring
  'keyctl', 'add_key', 'request_key',
  // kernel code and machine state
  'kexec_load', 'kexec_file_load', 'init_module', 'finit_module', 'delete_module', 'reboot', 'swapon', 'swapoff',
  'acct', 'settimeofday', 'stime', 'clock_settime', 'clock_settime64', 'clock_adjtime', 'clock_adjtime64', 'adjtimex',
  'iopl', 'ioperm', 'quotactl', 'quotactl_fd', 'nfsservctl', 'lookup_dcookie', 'uselib', 'vhangup', '_sysctl', 'sysfs',
  'syslog', 'create_module', 'get_kernel_syms', 'query_module',
  // kernel attack surface
  'bpf', 'perf_event_open', 'userfaultfd', 'io_uring_setup', 'io_uring_enter', 'io_uring_register',
  'open_by_handle_at', 'name_to_handle_at', 'fanotify_init', 'kcmp', 'process_vm_readv', 'process_vm_writev',
  'move_pages', 'mbind', 'set_mempolicy', 'migrate_pages',
]

/** CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (and CLONE_NEWTIME). */
const CLONE_NS_FLAGS = [0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080]

export function seccompProfile(): Record<string, unknown> {
  return {
    defaultAction: 'SCMP_ACT_ALLOW',
    architectures: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'],
    syscalls: [
      { names: DENIED_SYSCALLS, action: 'SCMP_ACT_ERRNO', errnoRet: EPERM },
      { names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
      // one rule per flag: conditions inside a rule are ANDed, rules are ORed
      ...CLONE_NS_FLAGS.map((flag) => ({
        names: ['clone'],
        action: 'SCMP_ACT_ERRNO',
        errnoRet: EPERM,
        args: [{ index: 0, value: flag, valueTwo: flag, op: 'SCMP_CMP_MASKED_EQ' }],
      })),
    ],
  }
}
