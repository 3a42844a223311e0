{
  "targets": [
    {
      "target_name": "strata_native",
      "sources": ["native/addon/strata_native.c"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "defines": ["_GNU_SOURCE", "NAPI_VERSION=8"]
    }
  ]
}
