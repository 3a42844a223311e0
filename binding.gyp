{
  "targets": [
    {
      "target_name": "strata_native",
      "sources": ["native/addon/strata_native.c"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "defines": ["_GNU_SOURCE", "NAPI_VERSION=8"]
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
