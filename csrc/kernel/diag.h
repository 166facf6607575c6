/* Debugging aids of the kernel layer (diag.c, envcheck.c): printing from
 * kernels, MKPY_DEBUG levels, debug builds, the profiler and the environment
 * check. No Python here: output goes through mkk_report_raw (the binding
 * prints it on sys.stdout) or, for MKPY_DEBUG, straight to stderr. */
#ifndef MKK_DIAG_H
#define MKK_DIAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

uint64_t mkk_now_ns(void);

/* ---- printing from kernels (os_log, printf) */

/* Does the kernel's source or header use os_log or printf? */
bool mkk_source_prints(const char *source, const char *header);
/* A message of one GPU thread (called by the compiled kernel through
 * mkpy_coop_api::print, on any worker). */
void mkk_print_record(const char *text, size_t len, const void *launch, uint64_t group, uint32_t thread);
/* Opens the collection of one launch's messages (launch: its argument
 * array, which the compiled kernel passes back), and closes it: the kept
 * messages are printed on sys.stdout by threadgroup, then thread, then call,
 * at most MKPY_KERNEL_PRINT_LIMIT of them (default 1000), with a note naming
 * how many were left out. */
void *mkk_print_begin(const void *launch);
void mkk_print_end(void *sink, const char *kernel_name);
/* Hands text to the reporter (sys.stdout) whatever its length (dispatch.c). */
void mkk_report_raw(const char *text);

/* ---- MKPY_DEBUG=1..3 (stderr) */

/* The level, from MKPY_DEBUG (read once) or mkk_set_debug_level. */
int mkk_debug_level(void);
void mkk_set_debug_level(int level);
void mkk_debug(int level, const char *fmt, ...) MK_PRINTF(2, 3);
/* A long text (generated Metal, translated C++), framed. */
void mkk_debug_text(int level, const char *title, const char *text);

/* ---- debug builds (-O0 -g, stable file names) */

/* MKPY_KERNEL_DEBUG=1 or mx.metal.set_kernel_debug(True). */
bool mkk_debug_build(void);
/* 1 on, 0 off, -1 back to the environment variable. */
void mkk_set_debug_build(int on);

/* ---- the profiler (mx.metal.start_capture / stop_capture) */

bool mkk_profiling(void);
/* Starts recording (a capture already running is an error). */
int mkk_profile_start(const char *path);
/* Stops and writes the Chrome trace JSON to the path given at start.
 * Returns 0, or -1 with an error set. */
int mkk_profile_stop(void);
/* The report table of the running or last capture (malloc'd). */
char *mkk_profile_report(void);
typedef struct {
    const char *name;       /* the kernel's name */
    const char *engine;     /* plain, lockstep, fibers */
    const char *cache;      /* memory, disk, compiled */
    uint64_t compile_begin, compile_end; /* ns: the lookup or compile */
    uint64_t run_begin, run_end;         /* ns: the launch */
    int64_t grid[3], threadgroup[3];
    uint64_t threads, groups;
    int barriers;           /* threadgroup_barrier calls in the source */
} mkk_profile_kernel;
void mkk_profile_record_kernel(const mkk_profile_kernel *r);

/* ---- the environment check (envcheck.c) */

/* The check's lines (malloc'd): "PASS|FAIL|WARN  item: detail", each FAIL
 * followed by "      fix: ...". *failures counts the FAIL lines. */
char *mkk_env_check(const char *python_line, int python_ok, int *failures);

/* What the kernel compiler setup looks like (jit.c), for the check. */
typedef struct {
    int cxx_ok;
    char cxx[4096], cxx_version[512];
    char runtime_dir[4096];
    char pch[3][4700]; /* the precompiled header of each math mode that `make build` makes */
    int pch_ok[3];
    char cbs_pass[4096]; /* the lockstep engine's pass program, "" when absent */
} mkk_probe_info;
void mkk_jit_probe(mkk_probe_info *p);

#endif
