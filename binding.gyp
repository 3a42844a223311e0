{
  "targets": [
    {
      "target_name": "strata_native",
      "sources": ["native/addon/strata_native.c", "native/addon/crc32c.c"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "defines": ["_GNU_SOURCE", "NAPI_VERSION=8"]
    },
    {
      # fuse-native's addon with Strata's fix (native/fuse/fuse-native.c says
      # what and why), built against libfuse 2.9 headers from fuse-native's own
      # dependency and linked to Debian's libfuse2, as fuse-native's prebuilt is.
      # fs/fuse/native.ts hands it to fuse-native's JavaScript.
      "target_name": "fuse_native",
      "include_dirs": [
        "<!(node -e \"require('napi-macros')\")",
        "<!(node -e \"require('fuse-shared-library/include')\")"
      ],
      "libraries": ["-l:libfuse.so.2"],
      "sources": ["native/fuse/fuse-native.c"],
      "cflags": ["-g", "-O3", "-Wall", "-Wno-unused-function", "-Wno-unused-variable", "-Wno-sign-compare"]
    },
    {
      # The in-sandbox agent: a fully static executable (glibc, no NSS, no
      # dlopen) so it runs in any image, with or without a libc.
      "target_name": "strata-agent",
      "type": "executable",
      "sources": [
        "native/agent/main.c",
        "native/agent/proto.c",
        "native/agent/files.c",
        "native/agent/tar.c",
        "native/agent/user.c"
      ],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-fno-strict-aliasing"],
      "ldflags": ["-static"],
      "defines": ["_GNU_SOURCE"]
    }
  ]
}
